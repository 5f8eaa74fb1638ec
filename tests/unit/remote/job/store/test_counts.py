"""A dataset's counts, as every stage that asks for items says them: its state from what is done,
left and in flight, and status.json's row with its rate and its speed."""

from __future__ import annotations

from dataclasses import dataclass

from remote.common.status import DatasetState
from remote.job.store.counts import DatasetCounts


@dataclass
class Items(DatasetCounts):
    target: int = 4


def test_its_state_follows_what_is_done_left_and_in_flight():
    c = Items()
    assert c.work_state(done=0, left=True) == DatasetState.PENDING
    c.in_flight, c.new = 1, 1
    assert c.work_state(done=1, left=True) == DatasetState.RUNNING
    c.in_flight = 0
    assert c.work_state(done=4, left=False) == DatasetState.COMPLETE
    assert c.work_state(done=2, left=True, budget_reached=True) == DatasetState.COMPLETE


def test_its_row_says_the_counts_the_rate_and_the_speed():
    c = Items(failed=1, new=3)
    c.made.add(100.0, 300)
    c.active.sent(95.0)
    c.active.add(300)
    c.active.ended(105.0)
    row = c.work_status(110.0, 90.0, done=3, records=5, tokens=300, state=DatasetState.RUNNING)
    assert (row.done, row.target, row.records, row.prompts) == (3, 4, 5, 4)
    assert (row.errors, row.failed_this_run, row.new_records) == (1, 1, 3)
    assert row.tokens_per_s == 300 / 20 and row.mean_tokens_per_s == 30.0
