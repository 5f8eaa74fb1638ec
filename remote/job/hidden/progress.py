"""The hidden-states stage's progress, per dataset: its rows to make, what is in flight, what failed;
and whether the rows left fit the disk."""

from __future__ import annotations

import collections

from ...common.caps import DISK_MARGIN, fmt_bytes
from ...common.records import TokenRow
from ...common.status import DatasetState
from .store import HiddenStore


class Stage:
    """One dataset in the stage: its store, the rows to make, what failed."""

    def __init__(self, name: str, store: HiddenStore, rows: list[TokenRow], budget: int | None):
        self.name, self.store, self.budget = name, store, budget
        self.target = len(rows)
        self.in_target = {r.id for r in rows}
        self.todo = collections.deque(r for r in rows if r.id not in store.done)
        self.in_flight = 0
        self.failed = 0
        self.new = 0

    @property
    def done(self) -> int:
        return sum(1 for rid in self.store.done if rid in self.in_target)

    def budget_reached(self) -> bool:
        return self.budget is not None and self.store.tokens >= self.budget

    def state(self) -> str:
        if self.done >= self.target or (self.budget_reached() and not self.in_flight):
            return DatasetState.COMPLETE
        if not self.todo and not self.in_flight and self.failed:
            return DatasetState.INCOMPLETE
        return DatasetState.RUNNING if self.in_flight or self.new else DatasetState.PENDING


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
        f"{fmt_bytes(free)} free: free space, move finished datasets off the host, or cap the "
        "stage (--max-tokens, --max-samples)"
    )
