"""A dataset's progress in the stage, and the disk arithmetic: the rows left, at what a token of
the rows made takes, with the margin, against the free space."""

from __future__ import annotations

from remote.common.records import TokenRow
from remote.common.status import DatasetState
from remote.job.hidden.progress import Stage, disk_refusal, fmt_bytes


class Store:
    def __init__(self, done=(), tokens=0, bytes=0):
        self.done = {rid: n for n, rid in enumerate(done)}
        self.counted = [(rid, tokens // len(done)) for rid in done]
        self.tokens, self.bytes = tokens, bytes


def rows(n: int, size: int = 10) -> list[TokenRow]:
    return [TokenRow(f"r{i}_gen0", f"r{i}", 0, [1] * (size - 2), [2, 3]) for i in range(n)]


def test_a_stage_counts_its_rows_in_target_and_knows_when_it_is_complete():
    st = Stage("B1", Store(done=["r0_gen0", "x_gen0"]), rows(3), None)
    assert (st.target, st.done, len(st.todo)) == (3, 1, 2) and st.state() == DatasetState.PENDING
    st.failed = 2
    st.todo.clear()
    assert st.state() == DatasetState.INCOMPLETE
    budgeted = Stage("B1", Store(done=["r0_gen0"], tokens=50), rows(3), 40)
    assert budgeted.budget_reached() and budgeted.state() == DatasetState.COMPLETE
    # the cap lowered to r1: r0's row stays made, counted in neither its rows nor its budget
    lowered = Stage("B1", Store(done=["r0_gen0"], tokens=50), rows(3)[1:2], 40)
    assert (lowered.done, lowered.tokens, lowered.budget_reached()) == (0, 0, False)
    lowered.store.counted.append(("r1_gen0", 45))  # its own row, counted since
    assert lowered.tokens == 45 and lowered.budget_reached()


def test_the_rows_left_must_fit_the_free_space_with_the_margin():
    made = Stage(
        "B1", Store(done=["r0_gen0"], tokens=10, bytes=1000), rows(11), None
    )  # 100 B/token
    assert disk_refusal([made], 10**6) is None
    assert disk_refusal([made], 10_499) is not None and disk_refusal([made], 10_500) is None
    why = disk_refusal([made], 5000)
    assert "need 10.3 KiB (100 tokens)" in why and "4.9 KiB free" in why
    fresh = Stage("B1", Store(), rows(11), None)
    assert disk_refusal([fresh], 1) is None  # nothing made: what a token takes is not known
    assert disk_refusal([made], None) is None  # the free space is not known
    assert fmt_bytes(4.6e12) == "4.2 TiB" and fmt_bytes(999) == "999 B"


def test_no_new_row_starts_until_the_next_rows_fit_said_once_a_fill_and_over_when_space_comes():
    from remote.job.hidden.progress import DiskGuard

    made = Stage("B1", Store(done=["r0_gen0"], tokens=10, bytes=1000), rows(11), None)
    made.in_flight = 2
    free, logged, notified = [10**6], [], []
    guard = DiskGuard(lambda: free[0], False, logged.append, notified.append)
    assert not guard.paused([made], 4)
    free[0] = 6299  # (2 in flight + 4 next) rows × 10 tokens × 100 B × 1.05 = 6300
    assert guard.paused([made], 4) and guard.paused([made], 4) and guard.full
    assert notified == ["the next 6 rows need about 6.2 KiB, the disk has 6.2 KiB free"]
    assert logged == [f"disk full: {notified[0]}: no new rows until there is space"]
    free[0] = 6300
    assert not guard.paused([made], 4) and not guard.full
    assert logged[-1] == "disk has space again: the stage goes on" and len(notified) == 1


def test_the_stage_that_cannot_fit_is_refused_unless_forced():
    from remote.job.hidden.progress import DiskGuard

    made = Stage("B1", Store(done=["r0_gen0"], tokens=10, bytes=1000), rows(11), None)
    logged = []
    assert "need 10.3 KiB" in DiskGuard(lambda: 5000, False, logged.append, None).refusal([made])
    forced = DiskGuard(lambda: 5000, True, logged.append, None)
    assert forced.refusal([made]) is None and forced.checked
    assert logged == ["--force: going on although the hidden states left need 10.3 KiB (100 tokens), "
                    "the disk has 4.9 KiB free; it pauses before it fills"]  # fmt: skip
