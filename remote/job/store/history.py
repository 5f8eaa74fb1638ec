"""run/history.jsonl: one short line a minute, kept across restarts, for `invoke report`.

A line holds the time, tokens/s, requests in flight, which servers were up, and per dataset [done,
tokens] and [seconds its answers were being made, their tokens] (every runner's, `rates.ActiveTime`)
only where they changed since the line before (all of them on a run's first line and every
hour), so a 30-day job stays a few MB. A runner start, of every stage, is a line of its own (the
minute lines are the answers' only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...common.codec import Codec, note_line, typed_lines
from .rates import IDLE_GAP_S, ActiveTime

FULL_EVERY = 60  # lines between two full snapshots


@dataclass
class Line(Codec):
    """At `t` (Unix seconds): a runner's start (its pid); or the job's tokens/s, requests in
    flight, [done, tokens] of each dataset, which servers were up ("10": the first of two) and
    `made`: [seconds, tokens] of each dataset's ActiveTime ("": the job's), what the next runner
    starts from."""

    t: int
    start: int | None = None
    tps: float | None = None
    fl: int | None = None
    ds: dict[str, list[int]] | None = None
    up: str | None = None
    made: dict[str, list[float]] | None = None
    stage: str | None = None  # a start's stage, where it is not the answers' (older lines: theirs)


class History:
    def __init__(self, path: Path):
        self.path = path
        self.last: dict[str, list[int]] = {}
        self.last_made: dict[str, list[float]] = {}
        self.lines = 0

    def start(self, t: float, pid: int, stage: str | None = None) -> None:
        """A runner's start; `stage`: its stage, where it makes something other than answers."""
        note_line(self.path, Line(round(t), start=pid, stage=stage))
        self.last, self.last_made, self.lines = {}, {}, 0

    def record(self, st, made: dict[str, ActiveTime] | None = None) -> None:
        """One line from a JobStatus, and the ActiveTime of each dataset and the job ("")."""
        now = {n: [d.done, d.completion_tokens] for n, d in st.datasets.items()}
        t = st.updated_at or 0
        made_now = {n: a.kept(t) for n, a in (made or {}).items()}
        full = self.lines % FULL_EVERY == 0
        ds = now if full else {n: v for n, v in now.items() if self.last.get(n) != v}
        mine = (
            made_now if full else {n: v for n, v in made_now.items() if self.last_made.get(n) != v}
        )
        up = "".join("1" if e.reachable else "0" for e in st.endpoints) or None
        line = Line(round(t), None, round(st.tokens_per_s, 1), st.in_flight, ds, up, mine or None)
        note_line(self.path, line)
        self.last, self.last_made = now, made_now
        self.lines += 1


def read(path: Path) -> list[Line]:
    """Every line, with `ds` filled in (the changed-only lines completed from the ones before)."""
    out, cur = [], {}
    for line in typed_lines(path, Line):
        if line.start is not None:
            cur = {}
        elif all(isinstance(v, list) and len(v) == 2 for v in (line.ds or {}).values()):
            cur = dict(cur, **(line.ds or {}))
            line.ds = dict(cur)
        else:
            continue  # a line no release wrote: each dataset's [done, tokens]
        out.append(line)
    return out


def active(path: Path, left: dict | None = None) -> dict[str, ActiveTime]:
    """Per dataset (and "" for the whole job), the tokens the runners so far made and the seconds
    they made them in: the last `made` written (each runner starts from the one before it, so it
    holds every runner's), or the one the runner before left in status.json (`left`) where that is
    the later (more seconds: a runner killed with -9 between two minute lines). Lines of a release
    that wrote none: between two lines of one runner, less than IDLE_GAP_S apart, where the tokens
    grew (a minute's granularity)."""
    out: dict[str, ActiveTime] = {}
    made: dict[str, ActiveTime] = {}
    prev_t, prev = None, {}
    for line in read(path):
        for name, v in (line.made or {}).items():
            if (a := ActiveTime.of_kept(v)) is not None:
                made[name] = a
        if line.start is not None:
            prev_t, prev = None, {}
            continue
        now = {n: v[1] for n, v in line.ds.items()}
        now[""] = sum(now.values())
        for name, tokens in now.items():
            a = out.setdefault(name, ActiveTime())
            grew = tokens - prev.get(name, tokens)
            if prev_t is not None and grew > 0 and line.t - prev_t < IDLE_GAP_S:
                a.seconds += line.t - prev_t
                a.tokens += grew
        prev_t, prev = line.t, now
    out.update(made)
    for name, v in (left or {}).items():
        a = ActiveTime.of_kept(v)
        if a is not None and a.seconds > out.get(name, ActiveTime()).seconds:
            out[name] = a
    return out
