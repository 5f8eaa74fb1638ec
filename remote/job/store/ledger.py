"""Each prompt's state in one dataset, held in one place; every change is a method that checks the
state it starts from, so "never lost, never recorded twice" is this file's rule, not a convention
kept across the dispatcher, the writer and the scheduler.

    new --send--> sent --answered--> held --recorded--> done
                   |--requeue, retry, settle--> queued --due--> new
                   `--fail--> failed --unfail--> new

`new` is every prompt the ledger holds nothing for (not yet sent in this run). A prompt with kept
tokens (an unfinished answer) is `partial` as well as queued: it is continued, not asked
again from its start.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Set
from enum import StrEnum


class PromptState(StrEnum):
    """One prompt's state in its dataset's ledger."""

    NEW = "new"  # not sent in this run
    QUEUED = "queued"  # to be sent again, not before a time
    SENT = "sent"  # in flight
    HELD = "held"  # answered, its record waiting for room on the disk
    DONE = "done"  # recorded
    FAILED = "failed"  # given up in this run (in <DS>.errors.jsonl)


_SEQ = itertools.count()  # tie-break in the retry queue: prompts never compare


class LedgerError(AssertionError):
    """A change the rules do not allow: a bug in the caller, never bad input."""


class View(Set):
    """A state's ids, read-only, without a copy (a resume holds a million done ids)."""

    __slots__ = ("_ids",)

    def __init__(self, ids: set):
        self._ids = ids

    def __contains__(self, pid) -> bool:
        return pid in self._ids

    def __iter__(self):
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


class Ledger:
    def __init__(self, done=()):
        """`done`: the ids recorded already; a set is taken over, not copied."""
        self._in = {
            s: set()
            for s in (PromptState.QUEUED, PromptState.SENT, PromptState.HELD, PromptState.FAILED)
        }
        self._in[PromptState.DONE] = done if isinstance(done, set) else set(done)
        self._queue: list = []  # heap of (not before, seq, prompt): each queued id once
        self.attempts: dict[str, int] = {}  # transient failures per prompt in this run
        self.requeues: dict[str, int] = {}  # times a server went away under the prompt
        self.partial: set[str] = set()  # queued with kept tokens: continued, not asked again

    # ------------------------------------------------------------------ reading

    def state(self, pid: str) -> str:
        for s, ids in self._in.items():
            if pid in ids:
                return s
        return PromptState.NEW

    def ids(self, state: str) -> View:
        """The ids in `state`: a read-only view (no copy), never changed from outside."""
        return View(self._in[state])

    @property
    def done(self) -> View:
        return self.ids(PromptState.DONE)

    @property
    def sent(self) -> View:
        return self.ids(PromptState.SENT)

    @property
    def failed(self) -> View:
        return self.ids(PromptState.FAILED)

    def done_among(self, ids) -> list[str]:
        """Those of `ids` that are recorded (a re-cap looks at a million of them)."""
        done = self._in[PromptState.DONE]
        return [pid for pid in ids if pid in done]

    def is_new(self, pid: str) -> bool:
        """Asked once per prompt the scan passes (a million on a resume): plain lookups."""
        i = self._in
        return not (
            pid in i[PromptState.DONE]
            or pid in i[PromptState.SENT]
            or pid in i[PromptState.QUEUED]
            or pid in i[PromptState.HELD]
            or pid in i[PromptState.FAILED]
        )

    def next_due_at(self) -> float | None:
        return self._queue[0][0] if self._queue else None

    # ------------------------------------------------------------------ changes

    def _move(self, pid: str, frm: tuple[str, ...], to: str) -> None:
        now = self.state(pid)
        if now not in frm:
            raise LedgerError(f"prompt {pid}: {now} -> {to} (allowed only from {', '.join(frm)})")
        if now != PromptState.NEW:
            self._in[now].discard(pid)
        if to != PromptState.NEW:
            self._in[to].add(pid)

    def send(self, pid: str) -> None:
        self._move(pid, (PromptState.NEW,), PromptState.SENT)

    def answered(self, pid: str) -> None:
        """Answered: its line waits to be written (at once, or once the disk has space)."""
        self._move(pid, (PromptState.SENT,), PromptState.HELD)

    def recorded(self, pid: str) -> None:
        self._move(pid, (PromptState.HELD,), PromptState.DONE)
        self.attempts.pop(pid, None)
        self.requeues.pop(pid, None)
        self.partial.discard(pid)

    def requeue(self, p, not_before: float, partial: bool = False) -> None:
        """Send `p` again from `not_before` on (a retry's backoff; 0: at once). From `new` only for a
        prompt with kept tokens, queued at start."""
        self._move(
            p.id,
            (PromptState.SENT, PromptState.NEW) if partial else (PromptState.SENT,),
            PromptState.QUEUED,
        )
        if partial:
            self.partial.add(p.id)
        heapq.heappush(self._queue, (not_before, next(_SEQ), p))

    def due(self, now: float):
        """The first queued prompt whose time has come, back to `new` (the caller sends it or leaves
        it to the scan); None when none is due."""
        if not self._queue or self._queue[0][0] > now:
            return None
        p = heapq.heappop(self._queue)[2]
        self._move(p.id, (PromptState.QUEUED,), PromptState.NEW)
        return p

    def fail(self, pid: str) -> None:
        """Given up on in this run (filed in the errors file): asked again only after a restart."""
        self._move(pid, (PromptState.SENT, PromptState.NEW), PromptState.FAILED)
        self.partial.discard(pid)

    def unfail(self, pid: str) -> None:
        """Not the prompt's fault after all (the job's): unfiled, left for the next run."""
        self._move(pid, (PromptState.FAILED,), PromptState.NEW)

    def settle(self, p) -> None:
        """A request ended without an outcome (cancelled at the end of the grace period, or a bug):
        queued again at once, so neither this run nor a resume loses it. Nothing when it has one."""
        if p.id in self._in[PromptState.SENT]:
            self.requeue(p, 0.0)

    def failed_attempt(self, pid: str) -> int:
        """One more transient failure of `pid`; returns how many it has had in this run."""
        n = self.attempts[pid] = self.attempts.get(pid, 0) + 1
        return n

    def went_away(self, pid: str) -> int:
        """A server went away (or hung) under `pid`; returns how many times in this run."""
        n = self.requeues[pid] = self.requeues.get(pid, 0) + 1
        return n

    def turn_answered(self, pid: str) -> None:
        """A conversation's turn came back: retries are counted per turn."""
        self.attempts.pop(pid, None)
