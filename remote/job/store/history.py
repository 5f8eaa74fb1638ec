"""run/history.jsonl: one short line a minute, kept across restarts, for `invoke report`.

A line holds the time, tokens/s, requests in flight, which servers were up, and per dataset [done,
tokens] only where they changed since the line before (all of them on a run's first line and every
hour), so a 30-day job stays a few MB. A runner start is a line of its own ({"t", "start": pid}).
"""

from __future__ import annotations

from pathlib import Path

from ...common.codec import json_lines, note_line
from .rates import IDLE_GAP_S, ActiveTime

FULL_EVERY = 60  # lines between two full snapshots


class History:
    def __init__(self, path: Path):
        self.path = path
        self.last: dict[str, list[int]] = {}
        self.lines = 0

    def start(self, t: float, pid: int) -> None:
        note_line(self.path, {"t": round(t), "start": pid})
        self.last, self.lines = {}, 0

    def record(self, st) -> None:
        """One line from a JobStatus."""
        now = {n: [d.done, d.completion_tokens] for n, d in st.datasets.items()}
        full = self.lines % FULL_EVERY == 0
        ds = now if full else {n: v for n, v in now.items() if self.last.get(n) != v}
        line = {
            "t": round(st.updated_at or 0),
            "tps": round(st.tokens_per_s, 1),
            "fl": st.in_flight,
            "ds": ds,
        }
        if st.endpoints:
            line["up"] = "".join("1" if e.reachable else "0" for e in st.endpoints)
        note_line(self.path, line)
        self.last = now
        self.lines += 1


def read(path: Path) -> list[dict]:
    """Every line, with `ds` filled in (the changed-only lines completed from the ones before)."""
    out, cur = [], {}
    for obj in json_lines(path):
        if "start" in obj:
            cur = {}
        else:
            cur = dict(cur, **obj.get("ds", {}))
            obj["ds"] = dict(cur)
        out.append(obj)
    return out


def active(path: Path) -> dict[str, ActiveTime]:
    """Per dataset (and "" for the whole job), the tokens the runners so far made and the seconds
    they made them in: between two lines of one runner, less than IDLE_GAP_S apart, where the
    tokens grew."""
    out: dict[str, ActiveTime] = {}
    prev_t, prev = None, {}
    for obj in read(path):
        if "start" in obj:
            prev_t, prev = None, {}
            continue
        now = {n: v[1] for n, v in obj["ds"].items()}
        now[""] = sum(now.values())
        for name, tokens in now.items():
            a = out.setdefault(name, ActiveTime())
            grew = tokens - prev.get(name, tokens)
            if prev_t is not None and grew > 0 and obj["t"] - prev_t < IDLE_GAP_S:
                a.seconds += obj["t"] - prev_t
                a.tokens += grew
        prev_t, prev = obj["t"], now
    return out
