"""What one tick of `invoke tail` shows: the live bars, a snapshot, plain lines, or the log. The
driver (ops/follow.py) polls the hosts; a view only draws what its host watches hold."""

from __future__ import annotations


def choose(out, *, once: bool, log: bool, live: bool):
    """The view for these flags: `out` is a rich Console; `live`: it is a terminal."""
    if log:
        return LogView(out)
    if once:
        return SnapshotView(out) if live else PlainView(out)
    return LiveView(out) if live else PlainView(out)


class _View:
    """What one tick of the watch shows. The driver (`watch`) polls; views only draw."""

    def __init__(self, out):
        self.out = out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def show(self, watches: list, now: float) -> None:
        raise NotImplementedError

    def finish(self, watches: list, now: float) -> None:
        """The job ended: anything left to show."""


def _snapshots(watches: list):
    return {w.host.name: w.status for w in watches}, {w.host.name: w.note for w in watches}


class LiveView(_View):
    """rich's Live: the bars redrawn in place (a terminal)."""

    def __enter__(self):
        from rich.live import Live

        self.live = Live(console=self.out, refresh_per_second=4, transient=False)
        self.live.__enter__()
        return self

    def __exit__(self, *exc):
        return self.live.__exit__(*exc)

    def show(self, watches, now):
        from . import progress

        self.live.update(progress.view(*_snapshots(watches), now))


class SnapshotView(_View):
    """One rich snapshot per tick (`--once` on a terminal)."""

    def show(self, watches, now):
        from . import progress

        self.out.print(progress.view(*_snapshots(watches), now))


class PlainView(_View):
    """One plain line per host per tick (not a terminal: logs, pipes, CI)."""

    def show(self, watches, now):
        from . import progress

        for w in watches:
            self.out.print(progress.plain_line(w.host.name, w.status, now, w.note), soft_wrap=True)


class LogView(_View):
    """runner.log as it grows (`--log`); a prefix per host when there are several."""

    def show(self, watches, now):
        for w in watches:
            self._lines(w, w.poll_log(now), len(watches) > 1)
            if w.note and w.failures:
                self.out.print(f"{w.host.name}: {w.note}", style="yellow")

    def finish(self, watches, now):
        for w in watches:  # the runner's last lines
            self._lines(w, w.poll_log(now), len(watches) > 1)

    def _lines(self, w, lines, prefixed):
        for line in lines:
            self.out.print(
                (f"{w.host.name}| " if prefixed else "") + line,
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
