"""The scheduler alone: which prompt goes next across datasets (job order, re-sends first), caps and
token budgets, with datasets held in memory."""

from __future__ import annotations

from remote.common.caps import Caps
from remote.job.loop.scheduler import Scheduler
from tests.unit.fakes import dataset, scheduler


def take(s: Scheduler, n: int, now: float = 0.0) -> list[str]:
    out = []
    for _ in range(n):
        nxt = s.next_prompt(now)
        if nxt is None:
            break
        run, p = nxt
        run.ledger.send(p.id)
        out.append(p.id)
    return out


def test_job_order_rolls_from_one_dataset_into_the_next():
    s = scheduler(dataset("B1", 2), dataset("B2", 2))
    assert take(s, 10) == ["B1-0", "B1-1", "B2-0", "B2-1"]
    assert not s.has_work()


def test_a_due_resend_in_a_later_dataset_goes_before_new_prompts():
    b1, b2 = dataset("B1", 5), dataset("B2", 5)
    s = scheduler(b1, b2)
    take(s, 1)
    b2.ledger.send("B2-3")
    b2.ledger.requeue(b2.prompts[3], not_before=5.0)  # a retry after its backoff
    assert take(s, 1, now=1.0) == ["B1-1"]  # not due yet
    assert take(s, 2, now=5.0) == ["B2-3", "B1-2"]


def test_caps_done_and_failed_prompts_are_skipped():
    b1 = dataset("B1", 6, done=["B1-1"])
    s = scheduler(b1, caps=Caps(max_samples=4))
    s.apply_caps(Caps(max_samples=4))
    b1.ledger.fail("B1-2")  # e.g. an unreadable line, filed at start
    assert take(s, 10) == ["B1-0", "B1-3"]
    assert b1.done_in_target == 1 and b1.target_n == 4


def test_a_lowered_cap_drops_queued_prompts_past_it_and_a_raised_one_brings_them_back():
    b1 = dataset("B1", 6)
    s = scheduler(b1)
    take(s, 5)
    b1.ledger.requeue(b1.prompts[4], 0.0)
    s.apply_caps(Caps(max_samples=2))
    assert take(s, 5) == [] and b1.ledger.is_new("B1-4")
    s.apply_caps(Caps(max_samples=6))
    assert take(s, 5) == ["B1-4", "B1-5"]  # the scan passes over it again: not lost


def test_a_cap_lowered_under_answers_in_flight_counts_them_and_sends_nothing_past_it():
    b1 = dataset("B1", 8)
    s = scheduler(b1)
    take(s, 6)  # B1-0 .. B1-5 in flight
    b1.ledger.answered("B1-5")  # answered, its line waiting for the disk: in flight still
    s.apply_caps(Caps(caps={"B1": 2}))
    assert b1.in_flight_beyond == 4 and take(s, 5) == []  # they finish; nothing new past the cap
    assert b1.record_done(b1.prompts[5], 10) is False  # written: kept beyond the cap
    assert b1.in_flight_beyond == 3
    s.apply_caps(Caps(caps={"B1": 4}))  # raised over some of them: the target's again
    assert b1.in_flight_beyond == 1  # B1-4 alone


def test_a_token_budget_stops_dispatch_but_not_what_is_in_flight():
    b1 = dataset("B1", 10)
    s = scheduler(b1)
    s.apply_caps(Caps(max_tokens=250))
    sent = take(s, 3)
    for pid in sent:
        b1.ledger.answered(pid)
        b1.record_done(b1.prompts[b1.prompts.ids.index(pid)], 100)
    assert b1.budget_reached() and s.next_prompt(0.0) is None and not s.has_work()
    assert b1.state() == "complete"


def test_a_deselected_dataset_sends_nothing_more():
    b1, b2 = dataset("B1", 3), dataset("B2", 3)
    s = scheduler(b1, b2)
    s.apply_caps(Caps(datasets=["B2"]))
    assert take(s, 10) == ["B2-0", "B2-1", "B2-2"]


def test_a_token_budget_sends_no_more_than_the_answers_in_flight_would_need_to_reach_it():
    """A budget of 1,000 tokens at a mean of 300 a record: four in flight would reach it, so a
    fifth is not sent (a window of 256 would have run 76k past it); an answer that ends short lets
    the next one go, one, not a window (short answers end first: a young mean is floored at
    est_tokens), and the budget reached ends the dataset."""
    b1 = dataset("B1", 20, est_tokens=300)
    s = scheduler(b1)
    s.apply_caps(Caps(max_tokens=1000))
    sent = take(s, 10)
    assert len(sent) == 4 and s.has_work()  # 0 + 4 × 300 ≥ 1,000: the fifth waits
    b1.ledger.answered(sent[0])
    b1.record_done(b1.prompts[b1.prompts.ids.index(sent[0])], 10)  # a short one first
    assert len(take(s, 10)) == 1  # 10 + 3 × 300 < 1,000 ≤ 10 + 4 × 300: one more
    for pid in sorted(b1.in_flight):
        b1.ledger.answered(pid)
        b1.record_done(b1.prompts[b1.prompts.ids.index(pid)], 300)
    assert b1.budget_reached() and s.next_prompt(0.0) is None and not s.has_work()
