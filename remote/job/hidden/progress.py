"""The hidden-states stage's progress, per dataset: its rows to make, what is in flight, what failed;
and its disk rules: whether the rows left fit, and when no new row may start."""

from __future__ import annotations

import collections
import itertools

from ...common.caps import DISK_MARGIN, fmt_bytes
from ...common.records import TokenRow
from ...common.status import DatasetStatus
from ..store.counts import DatasetCounts
from .store import HiddenStore


class Stage(DatasetCounts):
    """One dataset in the stage: its store, the rows to make (its `active`: over the stage's
    life, every runner's, which HiddenStage keeps)."""

    def __init__(self, name: str, store: HiddenStore, rows: list[TokenRow], budget: int | None):
        super().__init__()
        self.name, self.store, self.budget = name, store, budget
        self.target = len(rows)
        self.in_target = {r.id for r in rows}
        self.todo = collections.deque(r for r in rows if r.id not in store.done)
        self._tokens = self._upto = 0  # the target's tokens in the store's first _upto rows

    @property
    def done(self) -> int:
        return sum(1 for rid in self.store.done if rid in self.in_target)

    @property
    def tokens(self) -> int:
        """The tokens of the target's rows: a row made for a record now beyond a lowered cap stays
        on disk, counted in neither the done rows nor the budget. Added up as rows are counted:
        it is asked before every row the stage starts."""
        new = self.store.counted[self._upto :]
        self._tokens += sum(n for rid, n in new if rid in self.in_target)
        self._upto += len(new)
        return self._tokens

    def budget_reached(self) -> bool:
        return self.budget is not None and self.tokens >= self.budget

    def status(self, now: float, started: float) -> DatasetStatus:
        """status.json's part for the dataset: rows where the answers have records."""
        count, tokens = self.store.count, self.store.tokens
        return self.work_status(
            now,
            started,
            done=self.done,
            records=count,
            tokens=self.tokens,
            state=self.state(),
            mean_tokens=tokens / count if count else 0.0,
            budget=self.budget,
            budget_reached=self.budget_reached(),
        )

    def state(self) -> str:
        return self.work_state(self.done, bool(self.todo), self.budget_reached())


class DiskGuard:
    """The stage's disk rules: the rows left must fit the free space for it to start (unless
    forced); while it runs no new row starts until the next rows fit: a pause, which space freed
    ends by itself. `free_bytes()` is asked each time (None: not known)."""

    def __init__(self, free_bytes, force: bool, log, notify):
        self.free_bytes, self.force, self.log, self.notify = free_bytes, force, log, notify
        self.full = False  # paused now
        self.checked = False  # what a token takes was known at a check (a row is made)

    def refusal(self, stages) -> str | None:
        stages = list(stages)
        why = disk_refusal(stages, self.free_bytes())
        self.checked = self.checked or any(st.store.tokens for st in stages)
        if why and self.force:
            self.log(f"--force: going on although {why.split(':')[0]}; it pauses before it fills")
            return None
        return why

    def paused(self, stages, slots: int) -> bool:
        """Whether no new row may start now (said and notified once each time the disk fills)."""
        why = disk_pause(stages, self.free_bytes(), slots)
        if why is None:
            if self.full:
                self.full = False
                self.log("disk has space again: the stage goes on")
            return False
        if not self.full:
            self.full = True
            self.log(f"disk full: {why}: no new rows until there is space")
            self.notify(why)
        return True


def disk_pause(stages, free: int | None, slots: int) -> str | None:
    """Why no new row may start (None: it may): the rows in flight and the next `slots` rows, at
    what a token takes in the rows made, and 5% more, must fit in `free` bytes."""
    stages = list(stages)
    per_token = [st.store.bytes / st.store.tokens for st in stages if st.store.tokens]
    todo = [r for st in stages for r in itertools.islice(st.todo, slots)]
    if not per_token or free is None or not todo:
        return None
    mean = sum(len(r.input_ids) for r in todo) / len(todo)
    rows = slots + sum(st.in_flight for st in stages)
    need = int(rows * mean * max(per_token) * DISK_MARGIN)
    if need <= free:
        return None
    return f"the next {rows} rows need about {fmt_bytes(need)}, the disk has {fmt_bytes(free)} free"


def disk_refusal(stages, free: int | None) -> str | None:
    """Why the rows left cannot fit in `free` bytes (None: they can, or it is not known yet): the
    bytes a token takes are the rows' own, once one is made."""
    stages = list(stages)
    per_token = [st.store.bytes / st.store.tokens for st in stages if st.store.tokens]
    if not per_token or free is None:
        return None
    left = sum(len(r.input_ids) for st in stages for r in st.todo)
    need = int(left * max(per_token) * DISK_MARGIN)
    if need <= free:
        return None
    return (
        f"the hidden states left need {fmt_bytes(need)} ({left:,} tokens), the disk has "
        f"{fmt_bytes(free)} free: free space, cap the stage (--max-tokens, --max-samples), or "
        "restart it with --force to go on and take finished files off the host as it runs "
        "(`invoke pull --hidden-states --free`): it pauses before the disk fills"
    )
