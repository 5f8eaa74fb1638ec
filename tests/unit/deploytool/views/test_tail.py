"""What one tick of `invoke tail` shows for its flags: a line per host when piped, a snapshot, the
runner's log as it grows (prefixed by host when there are several, warnings once a host fails)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from rich.console import Console

from deploytool.config import HostConfig
from deploytool.views import tail
from remote.common.status import DatasetStatus, JobView


@dataclass
class Watch:
    """A host's watch as the driver holds it (ops/follow.HostWatch's fields the views read)."""

    name: str
    status: JobView | None = None
    note: str | None = None
    failures: int = 0
    log: list = field(default_factory=list)

    @property
    def host(self):
        return HostConfig(name=self.name)

    def poll_log(self, now):
        lines, self.log = self.log, []
        return lines


def console(terminal: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=200, force_terminal=terminal, highlight=False), buf


def running(done: int) -> JobView:
    return JobView(state="running", datasets={"B1": DatasetStatus(done=done, target=24)})


def test_the_flags_choose_the_view():
    out, _ = console(False)
    assert type(tail.choose(out, once=False, log=True, live=True)) is tail.LogView
    assert type(tail.choose(out, once=True, log=False, live=True)) is tail.SnapshotView
    assert type(tail.choose(out, once=True, log=False, live=False)) is tail.PlainView
    assert type(tail.choose(out, once=False, log=False, live=True)) is tail.LiveView
    assert type(tail.choose(out, once=False, log=False, live=False)) is tail.PlainView


def test_piped_one_line_per_host_per_tick():
    out, buf = console(False)
    view = tail.PlainView(out)
    view.show([Watch("gpu1", running(5)), Watch("gpu2", None, note="unreachable")], now=0.0)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2
    assert "gpu1: running | B1 5/24" in lines[0]
    assert lines[1].endswith("gpu2: no status yet (unreachable)")


def test_the_log_view_prefixes_hosts_only_when_there_are_several_and_says_a_failing_one():
    out, buf = console(False)
    view = tail.LogView(out)
    one = Watch("gpu1", log=["started [B1]", "a line"])
    view.show([one], now=0.0)
    assert buf.getvalue().splitlines() == ["started [B1]", "a line"]  # markup left as written
    out, buf = console(False)
    view = tail.LogView(out)
    a, b = Watch("gpu1", log=["x"]), Watch("gpu2", note="unreachable", failures=2)
    view.show([a, b], now=0.0)
    a.log = ["last"]
    view.finish([a, b], now=1.0)
    assert buf.getvalue().splitlines() == ["gpu1| x", "gpu2: unreachable", "gpu1| last"]


def test_a_snapshot_and_the_live_view_draw_the_bars():
    out, buf = console(True)
    tail.SnapshotView(out).show([Watch("gpu1", running(12))], now=0.0)
    assert "gpu1" in buf.getvalue() and "12/24" in buf.getvalue()
    out, buf = console(True)
    with tail.LiveView(out) as view:
        view.show([Watch("gpu1", running(24))], now=0.0)
    assert "24/24" in buf.getvalue()
