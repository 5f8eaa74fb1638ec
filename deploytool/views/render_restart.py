"""What restart and stop print: the caps table (what a command changed marked), the restart's
and the stop's answers, and stop's lines while the host waits."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from remote.common.protocol import KILL_AFTER_GRACE_S
from remote.common.stages import FIRST, STAGES, stage_of
from remote.common.status import NOT_RUN, JobView

from .progress import fmt_tokens as _tok
from .render import console, job_differs
from .typed import say

if TYPE_CHECKING:
    from remote.common.answers import RestartAnswer, StopAnswer
    from remote.common.caps import CapRow, Caps


def _cap(n: int | None, selected: bool = True) -> str:
    if not selected:
        return NOT_RUN
    return "all" if n is None else f"{n:,}"


def _budget(t: int | None) -> str:
    return "none" if t is None else _tok(t)


def caps_table(
    caps: dict[str, CapRow],
    out: Console = console,
    kept: Caps | None = None,
    was: Caps | None = None,
) -> None:
    """The job's caps, a row per dataset, what this command changed marked `was → now`; a dry
    run's rows are the targets and states those caps would give the records there are now (the
    host's, in status's words)."""
    if not caps:
        return
    t = Table("dataset", "cap", "done", "target", "state", box=None, pad_edge=False)
    short = {}  # cap -> datasets whose file has fewer prompts than it
    for name, d in caps.items():
        cap = _cap(d.cap, d.selected)
        if d.changed and not (d.selected or d.was_selected):  # kept for when it runs again
            cap = f"[bold]{NOT_RUN} (cap {_cap(d.was)} → {_cap(d.cap)})[/]"
        elif d.changed:
            held = f" (cap {_cap(d.cap)})" if not d.selected and d.cap != d.was else ""
            cap = f"[bold]{_cap(d.was, d.was_selected)} → {cap}{held}[/]"
        known = d.prompts > 0 or d.target > 0  # a stage without prompts counts its rows (train)
        if not d.selected:  # no target, no done of it (a live re-cap's read 0): `status` says
            d, known = dataclasses.replace(d, state=NOT_RUN), False  # its records made
        done = f"{d.done:,}" + (f"–{d.done_most:,}" if d.done_most is not None else "")
        t.add_row(
            name,
            cap,
            done if known else "-",
            (f"{d.target:,}" + ("*" if d.short_of_cap else "")) if known else "-",
            d.state or "-",
        )
        if d.short_of_cap and known:
            short.setdefault(d.cap, []).append(name)
    out.print(t)
    if kept is not None and was is not None and kept.max_tokens != was.max_tokens:
        out.print(f"  max-tokens [bold]{_budget(was.max_tokens)} → {_budget(kept.max_tokens)}[/]")
    elif kept is not None and kept.max_tokens is not None:
        out.print(f"  max-tokens {_budget(kept.max_tokens)} per dataset")
    if kept is not None and was is not None and kept.eval_samples != was.eval_samples:
        values = [
            f"{n:,}" if n is not None else "server.draft's"
            for n in (was.eval_samples, kept.eval_samples)
        ]
        # kept with the caps in any stage; only the measuring stages ask them
        asking = [s.name for s in STAGES.values() if s.measures]
        later = "" if kept.stage in asking else f"; the {' and '.join(asking)} stages ask them"
        out.print(
            f"  eval-samples [bold]{values[0]} → {values[1]}[/] (held-out prompts a dataset{later})"
        )
    if not any(d.changed for d in caps.values()) and (kept is None or kept == was):
        out.print("  caps unchanged (the job's own: flags change only what they name)")
    _footnotes(caps, short, out, stage_of(kept.stage if kept else None).makes_answers)


def _footnotes(caps: dict[str, CapRow], short: dict, out: Console, answers: bool = True) -> None:
    """What the table's marks mean: a done said as a range, a cap beyond its file (`*`), or, in
    a stage made of the answers (`answers` False), beyond the answers there are."""
    ranged = [n for n, d in caps.items() if d.done_most is not None]
    if ranged:
        out.print(
            f"  {', '.join(ranged)}: done a range: the status cannot tell how many of the records "
            "fall in the new target; the runner counts them as it takes it"
        )
    for cap, names in short.items():
        if not answers:  # the stage's target is the answers made: fewer where they are unfinished
            out.print(
                f"  * {', '.join(names)}: fewer answers than the cap of {cap:,}: the stage takes "
                f"every answer made (`invoke restart --stage {FIRST.name}` makes the rest first)"
            )
            continue
        out.print(
            f"  * {', '.join(names)}: fewer prompts than the cap of {cap:,}: "
            "the target is every prompt of the file"
        )


def raised_targets(r: RestartAnswer, out: Console = console) -> None:
    """Before a restart that runs more than the job had: which datasets grow, in one line (a line
    each buried the rest under eight alike); datasets that grow alike are named together."""
    alike: dict[tuple[str, bool], list[str]] = {}  # (was → now, the whole file) -> names
    for name, d in r.caps.items():
        if d.raised:
            whole = d.prompts > 0 and (d.cap is None or d.cap >= d.prompts)
            # a file not counted (0): the cap is the most it reaches, never a target to read
            most = "up to " if not d.prompts and d.cap is not None else ""
            more = f"{_cap(d.was, d.was_selected)} → {most}{_cap(d.prompts if whole else d.cap)}"
            if d.was_selected and not d.cap_raised:  # the same cap over a file that grew
                more = f"{d.was_target:,} → {d.target:,}"
            alike.setdefault((more, whole), []).append(name)
    if not alike:
        return

    def how(more: str, whole: bool, n: int) -> str:
        return f"({more} prompts" + (
            f": every prompt of {'the file' if n == 1 else 'each file'})" if whole else ")"
        )

    groups = list(alike.items())
    if len(groups) == 1 and len(groups[0][1]) == 1:  # one dataset: said as before
        (more, whole), (name,) = groups[0]
        text = f"{name}'s target goes up {how(more, whole, 1)}"
    else:
        text = "targets go up: " + "; ".join(
            f"{', '.join(names)} {how(more, whole, len(names))}" for (more, whole), names in groups
        )
    out.print(f"[yellow]{r.host}: {text}[/]")


def held_back(r: RestartAnswer, out: Console = console) -> None:
    """A re-cap given to the running runner because the deployed release would mix settings."""
    if not r.held_back:
        return
    fix = say(
        "the running runner goes on with the settings they were made with; deploy those again "
        "(`invoke status` names a release on the host made with them: `invoke rollback --to ID`), "
        "or `invoke restart --force` to start the deployed release and mix them",
        r.host,
    )
    out.print(f"  [yellow]{escape(r.held_back)}[/]: {escape(fix)}")


def forced_mix(r: RestartAnswer, out: Console = console) -> None:
    """--force over records made with other settings: which datasets it mixes, and how, on the
    host's line as it goes ahead (a dry run's: as it would)."""
    if not r.forced_mix:
        return
    if r.dry_run:
        how = "--force would mix settings", "resumed with the new ones, each would hold"
    else:
        how = "--force mixes settings", "resumed with the new ones, each now holds"
    out.print(
        f"[bold]{r.host}[/]: [yellow]{how[0]}: {escape(r.forced_mix)}; {how[1]} records made "
        "with more than one set of settings from its first new record on (one with nothing left "
        "to make keeps its records' own; `invoke export` asks for --mixed where both are "
        "written)[/]"
    )


def _would(r: RestartAnswer) -> str:
    """What a dry run's restart would do, in a phrase."""
    what = {
        "unchanged": f"leave runner pid {r.running_pid} running: it runs these caps already",
        "live": "re-cap the running runner live (nothing lost)",
        "restart": f"stop runner pid {r.running_pid} and start a new one",
        "start": "start a runner",
    }[r.mode]
    if r.kept.stage != r.was.stage:
        what += f", stage {r.was.stage} → {r.kept.stage}"
    if r.kept.follows():
        what += f", then {', then '.join(r.kept.chain())} (the watcher starts it)"
    if r.switch is not None:  # the host would see it through alone, the model's load included
        why = f"the server {r.switch.why}" if r.switch.why else "the server is down"
        act = "start" if stage_of(r.switch.stage).asks_server else "stop"
        what = f"{act} the server for the {r.switch.stage} stage first ({why}), then " + what
    return what


NOTHING_DRAINED = (
    "  --drain: nothing stopped, nothing to drain (a change of caps alone goes to the running "
    "runner); `--hard --drain` stops it, its answers in flight finished first"
)


def restart_result(r: RestartAnswer, out: Console = console, *, drain: bool = False) -> None:
    """`drain`: --drain was typed (a caps-only change stops nothing for it to drain)."""
    host = f"[bold]{r.host}[/]"
    if r.job_differs:  # before anything else: what runs is a deployed job, not the one edited
        started = (r.release or "").rstrip("/").rsplit("/", 1)[-1]
        if r.dry_run:
            what = "this would run the deployed one"
        elif started:  # a deploy while it ran may have put another there since
            what = f"this started release {started}"
        else:
            what = "the runner goes on with the release it runs"
        out.print(f"{host}: [yellow]{escape(job_differs(r.host))}; {what}[/]")
    if r.dry_run:
        raised_targets(r, out)
        forced_mix(r, out)
        out.print(f"{host}: dry run: would {_would(r)}; nothing changed. The caps it would run:")
        held_back(r, out)
        caps_table(r.caps, out, r.kept, r.was)
        caps_moved(r, out)
        return
    if r.mode == "unchanged":
        out.print(f"{host}: caps unchanged: runner pid {r.pid} runs them already; nothing touched")
    elif r.mode == "live":
        out.print(f"{host}: re-capped live: runner pid {r.pid} kept running, no request lost")
        for name, change in r.reloaded.items():
            out.print(f"  {name}: prompts {change.before:,} → {change.after:,}, reloaded")
        held_back(r, out)
    else:
        forced_mix(r, out)  # before what it did: the start that mixed them
        stopped = r.stopped
        if stopped and stopped.was_running:
            extra = f", strays {stopped.strays}" if stopped.strays else ""
            killed = f", SIGKILL {stopped.killed}" if stopped.killed else ""
            found = f"; {escape(stopped.found)}" if stopped.found else ""
            out.print(
                f"{host}: stopped pid(s) {stopped.stopped}{extra}{killed}{found}; {cut_off_text(r)}"
            )
        release = (r.release or "").rstrip("/").rsplit("/", 1)[-1]
        stage = ""
        if r.kept.stage != r.was.stage:  # said either way: the job now makes something else
            stage = f"stage {r.was.stage} → {r.kept.stage}, "
        elif stage_of(r.kept.stage).label:
            stage = f"stage {r.kept.stage}, "
        if r.kept.follows():
            stage += f"then {', then '.join(r.kept.chain())} (the watcher starts it), "
        out.print(
            f"{host}: started runner pid {r.pid} from release {release}; {stage}state {r.state}"
        )
        if r.gpu and r.gpu.note:
            out.print(f"  {r.gpu.note}")
    caps_table(r.caps, out, r.kept, r.was)
    caps_moved(r, out)
    if r.mode == "live":
        beyond_lowered_caps(r.caps, out)
    if drain and r.mode in ("live", "unchanged"):  # typed, and nothing stopped: said
        out.print(NOTHING_DRAINED)


def lowered_targets(r: RestartAnswer, out: Console = console) -> None:
    """Caps this command lowered under records made: one line, as a raise is said (a plan
    --apply took B8 from 32 to 7 with its 25 records beyond said nowhere)."""
    alike: dict[tuple[str, int], list[str]] = {}  # (was → now, beyond) -> names, said together
    down = False  # a cap this command lowered (else only datasets run again under theirs)
    for name, d in r.caps.items():
        lowered = d.cap is not None and (d.was is None or d.cap < d.was)
        if lowered and d.selected and d.was_selected and d.beyond:
            alike.setdefault((f"{_cap(d.was, True)} → {d.cap:,}", d.beyond), []).append(name)
            down = True
        elif d.selected and not d.was_selected and d.beyond:  # a cap lowered while left out
            alike.setdefault((f"run again at {_cap(d.cap)}", d.beyond), []).append(name)
    parts = [
        f"{', '.join(names)} ({how}: {n:,} beyond {'it' if len(names) == 1 else 'each'})"
        for (how, n), names in alike.items()
    ]
    left: dict[str, list[str]] = {}  # `--datasets B1 --max-samples 10`: every dataset's cap
    for name, d in r.caps.items():
        if d.was_selected and not d.selected and d.cap != d.was:
            left.setdefault(f"{_cap(d.was)} → {_cap(d.cap)}", []).append(name)
    if left:
        said = "; ".join(f"{', '.join(names)} ({how})" for how, names in left.items())
        out.print(
            f"  caps changed of datasets not run now, kept for when they run again: {said} "
            "(`--cap NAME=N` caps one dataset alone)",
            markup=False,
        )
    if parts:
        head = "targets go down" if down else "targets below the records made"
        out.print(
            f"  {head}: {'; '.join(parts)}: those records stay on the host, out of the counts and "
            "of export (--keep beyond_cap exports them)",
            markup=False,
        )


def caps_moved(r: RestartAnswer, out: Console = console) -> None:
    """Under the caps table: kept caps dropped with their datasets, targets lowered under records."""
    caps_dropped(r, out)
    lowered_targets(r, out)


def caps_dropped(r: RestartAnswer, out: Console = console) -> None:
    """A kept cap of a dataset the deployed job no longer has goes with it: said, or a dataset put
    back later starts again at the default cap with no word."""
    for name, cap in r.was.caps.items():
        if name not in r.kept.caps and name not in r.caps:
            out.print(
                f"  {name}: its kept cap of {cap:,} dropped: the deployed job has no {name} (put "
                "back, it runs at the job's default cap unless given one: `--cap "
                f"{name}={cap}`)",
                markup=False,
            )
    chosen = r.kept.datasets or []
    for name in r.was.datasets or []:
        if name not in chosen and name not in r.caps:  # a selection that kept it goes on without
            out.print(
                f"  {name}: no longer among the datasets run (--datasets): the deployed job has no "
                f"{name} (put back, `--datasets {','.join([*chosen, name])}` runs it again)",
                markup=False,
            )


def beyond_lowered_caps(caps: dict[str, CapRow], out: Console = console) -> None:
    """A cap lowered live: the answers already in flight past it are not cancelled (their tokens
    are being made): said per dataset, or they would grow its records beyond the cap unsaid."""
    for name, d in caps.items():
        n = d.in_flight_beyond
        if not n or not d.changed:  # an earlier re-cap's: not this command's to say
            continue
        if not d.selected:  # left out live: no cap to be beyond
            out.print(
                f"  {name}: left out (--datasets): its {n:,} answer{'s' if n != 1 else ''} in "
                f"flight {'finish and are' if n != 1 else 'finishes and is'} kept; nothing new "
                "is sent",
                markup=False,
            )
            continue
        there = (
            f"; {d.beyond:,} record{'s' if d.beyond != 1 else ''} there already" if d.beyond else ""
        )
        out.print(
            f"  {name}: {n:,} answer{'s' if n != 1 else ''} in flight beyond the new cap "
            f"{'finish and are' if n != 1 else 'finishes and is'} kept beyond it (nothing new is "
            f"sent past it{there}; export leaves them out: --keep beyond_cap)",
            markup=False,
        )


def restart_outcome(results: dict, failures: dict, out: Console = console) -> None:
    """After a restart that failed on some of its hosts: which it changed and which not, in one
    line (each host's own line above says what it did)."""
    changed = [h for h, r in results.items() if r.mode != "unchanged"]
    same = [h for h, r in results.items() if r.mode == "unchanged"]
    parts = [f"changed: {', '.join(changed) or 'none'}"]
    if same:
        parts.append(f"untouched: {', '.join(same)} (they ran these caps already)")
    failed = ",".join(failures)
    parts.append(
        f"failed: {', '.join(failures)} (its FAILED line says how far it got; "
        f"`invoke status --host {failed}` shows its job now)"
    )
    out.print(escape(say("restart: " + "; ".join(parts), failed)), highlight=False)


def _requests(n: int) -> str:
    return f"{n:,} request{'s' if n != 1 else ''}"


class Stopping:
    """What `stop` says while the host waits: what it stops, then how it goes, at the first second,
    at each change of phase (the grace spent, the runner's kill due, the runner gone) and every
    SAY_EVERY_S between."""

    SAY_EVERY_S = 5.0

    def __init__(self, host: str, grace: float, drain: bool, out: Console = console):
        self.host, self.grace, self.drain, self.out = host, grace, drain, out
        self.kill_at = grace + KILL_AFTER_GRACE_S  # the runner still there then is killed
        self.shown_at: float | None = None
        self.phase = None
        # a stop or a drain already under way, another command's, in words: the host carries
        # out one command at a time, so this one waits for that one, not its own grace
        self.another: tuple[str, str] | None = None
        self.pid: int | None = None  # the runner it stops
        self.began = 0.0  # when its grace began: later where a restart's new runner came first

    def __call__(self, st: JobView | None, waited: float) -> None:
        alive = st is not None and st.runner is not None and st.runner.alive
        if waited and st is None:
            return  # a look that failed: no news, said at the next one
        if waited == 0:
            if alive:  # else the answer says there was nothing to stop
                self.another, self.pid = self._another(st), st.runner.pid
                how = self._how(st.in_flight, st.signalled)
                self.out.print(f"[bold]{self.host}[/]: stopping runner pid {st.runner.pid}: {how}")
            return
        if alive and self.pid is not None and st.runner.pid != self.pid:
            # started while this waited (by the restart it waited on, or the watcher): stopped now
            self.another, self.pid, self.began = self._another(st), st.runner.pid, waited
            self.shown_at = self.phase = None
            self.out.print(
                f"  {self.host}: runner pid {self.pid} was started meanwhile: stopping it: "
                f"{self._how(st.in_flight)}",
                markup=False,
            )
            return
        text, phase = self._now(st, alive, waited - self.began)
        due = self.shown_at is None or waited - self.shown_at >= self.SAY_EVERY_S
        if not due and phase == self.phase:
            return
        self.shown_at, self.phase = waited, phase
        self.out.print(f"  {self.host}: waiting {waited:.0f}s: {text}", markup=False)

    # a stop typed over a drain, a restart's stop or a longer stop gives the runner its grace now
    OVERRIDES_DRAIN = True

    def _another(self, st: JobView) -> tuple[str, str] | None:
        """A stop or a drain of another command's that the runner is in: its words, and what
        they leave to say about it."""
        if self.drain or st.signalled:  # a signal's stop holds no command: this one acts now
            return None
        shorter = st.stopping is not None and self.grace < st.stopping
        if self.OVERRIDES_DRAIN and (st.restarting or shorter):  # its grace is cut to this one's
            return None
        if st.draining and st.stopping is None and not self.OVERRIDES_DRAIN:
            return "the drain under way", " (`invoke stop` cuts it short)"
        if st.stopping not in (None, self.grace):
            return f"the stop under way's {st.stopping:g}s of grace", " from its start"
        return None

    def _now(self, st: JobView, alive: bool, waited: float) -> tuple[str, tuple]:
        """What goes on now, in words, and its phase (a change of phase is said at once)."""
        flight = st.in_flight
        if not alive:  # the host ends what of it is left, then answers
            return "runner gone; ending any process of it still running", ("gone",)
        if self.another is not None:  # when that one began is not known here: no time left
            return f"{flight} in flight, in {self.another[0]}", ("another",)
        if self.drain:  # its SIGTERM comes once the drain is done (or timed out)
            sent = st.stopping is not None  # its grace: this one's, or a stop's typed over it
            left = f"SIGTERM sent, {st.stopping:g}s of grace" if sent else "draining"
            return f"{flight} in flight, {left}", ("drain", sent)
        if waited < self.grace:
            return f"{flight} in flight, {self.grace - waited:.0f}s of grace left", ("grace",)
        if waited < self.kill_at:
            # no count: the look's may be a second behind; the answer gives the runner's own
            return (
                "grace over: the runner cuts off what is still in flight and exits; killed at "
                f"{self.kill_at:g}s if it has not",
                ("over",),
            )
        return "the runner did not exit: killing it and its processes (SIGKILL)", ("kill",)

    def _how(self, flight: int, signalled: str | None = None) -> str:
        if self.another is not None:  # another command's, which the host carries out first
            what, how = self.another
            return (
                f"stopping already: {what}{how} for the {_requests(flight)} in flight; the host "
                "carries out one command at a time: this one goes on once that one is done"
            )
        if not flight:  # none seen yet: the status may be a second behind its first requests
            return (
                f"SIGTERM; the requests in flight get {self.grace:g}s to finish, then the runner "
                f"cuts off the rest and exits (killed at {self.kill_at:g}s if it has not)"
            )
        if signalled:  # the runner takes a second signal as "now"
            return (
                f"stopping already, after a {signalled} not of deploytool's; SIGTERM again cuts "
                f"off the {_requests(flight)} in flight now"
            )
        if self.drain:
            return (
                f"draining: no new requests; the {flight} in flight finish, then SIGTERM, "
                f"{self.grace:g}s of grace, and the runner exits (killed if it does not)"
            )
        return (
            f"SIGTERM; the {_requests(flight)} in flight {'gets' if flight == 1 else 'get'} "
            f"{self.grace:g}s to finish, then the "
            f"runner cuts off the rest and exits (killed at {self.kill_at:g}s if it has not)"
        )


class Restarting(Stopping):
    """What a restart says while the host stops the runner that ran, as `stop` says it: from the
    first look that finds it asked to stop (a live re-cap, or a start, says nothing) until it is
    gone, said once (the restart's own answer follows)."""

    OVERRIDES_DRAIN = False  # the host carries out the drain under way first

    def __init__(self, host: str, grace: float, drain: bool, out: Console = console):
        super().__init__(host, grace, drain, out)
        self.old: int | None = None  # the runner seen stopping
        self.since = 0.0
        self.gone = False

    def __call__(self, st: JobView | None, waited: float) -> None:
        if st is None or self.gone:
            return
        r = st.runner
        ours = r is not None and r.alive and (self.old is None or r.pid == self.old)
        if self.old is None:
            if ours and (st.stopping is not None or st.draining):
                self.old, self.since = r.pid, waited
                super().__call__(st, 0.0)
            return
        if not ours:
            self.gone = True
            self.out.print(
                f"  {self.host}: waiting {waited - self.since:.0f}s: runner pid {self.old} gone, "
                "starting the new one",
                markup=False,
            )
            return
        super().__call__(st, waited - self.since)


def detached(hosts: str, doing: str, out: Console = console) -> None:
    """After a Ctrl-C: what the hosts go on doing without us (each was asked at once)."""
    names = [h.strip() for h in hosts.split(",") if h.strip()]
    who = "the host" if len(names) < 2 else f"each host ({', '.join(names)})"
    out.print(say(f"detached: {who} goes on {doing}", hosts), markup=False)


def stop_result(r: StopAnswer, out: Console = console) -> None:
    found = f"; {escape(r.found)}" if r.found else ""
    if not r.was_running:
        out.print(f"[bold]{r.host}[/]: no runner was running{found}")
        return
    killed = f"; SIGKILL after the grace period: {r.killed}" if r.killed else ""
    out.print(f"[bold]{r.host}[/]: stopped {r.stopped}{killed}{found}; {cut_off_text(r)}")


def cut_off_text(r) -> str:
    """The requests a stop cut off in flight: not lost, asked again (or continued) at the next
    start."""
    n = r.lost_in_flight
    return f"requests cut off in flight: {n}" + (" (the next start asks them again)" if n else "")
