"""A dataset's progress in the stage, and the disk arithmetic: the rows left, at what a token of
the rows made takes, with the margin, against the free space."""

from __future__ import annotations

from remote.common.records import TokenRow
from remote.common.status import DatasetState
from remote.job.hidden.progress import Stage, disk_refusal, fmt_bytes


class Store:
    def __init__(self, done=(), tokens=0, bytes=0):
        self.done = {rid: n for n, rid in enumerate(done)}
        self.tokens, self.bytes = tokens, bytes


def rows(n: int, size: int = 10) -> list[TokenRow]:
    return [TokenRow(f"r{i}_gen0", f"r{i}", 0, [1] * (size - 2), [2, 3]) for i in range(n)]


def test_a_stage_counts_its_rows_in_target_and_knows_when_it_is_complete():
    st = Stage("B1", Store(done=["r0_gen0", "x_gen0"]), rows(3), None)
    assert (st.target, st.done, len(st.todo)) == (3, 1, 2) and st.state() == DatasetState.PENDING
    st.failed = 2
    st.todo.clear()
    assert st.state() == DatasetState.INCOMPLETE
    budgeted = Stage("B1", Store(tokens=50), rows(3), 40)
    assert budgeted.budget_reached() and budgeted.state() == DatasetState.COMPLETE


def test_the_rows_left_must_fit_the_free_space_with_the_margin():
    made = Stage(
        "B1", Store(done=["r0_gen0"], tokens=10, bytes=1000), rows(11), None
    )  # 100 B/token
    assert disk_refusal([made], 10**6) is None
    assert disk_refusal([made], 10_499) is not None and disk_refusal([made], 10_500) is None
    why = disk_refusal([made], 5000)
    assert "need 10.5 KB (100 tokens)" in why and "5.0 KB free" in why
    fresh = Stage("B1", Store(), rows(11), None)
    assert disk_refusal([fresh], 1) is None  # nothing made: what a token takes is not known
    assert disk_refusal([made], None) is None  # the free space is not known
    assert fmt_bytes(4.6e12) == "4.6 TB" and fmt_bytes(999) == "999 B"
