"""The prompt ledger: each transition from the states it may start from only, and (property test)
any sequence of sends, answers, failures, server losses, kills and re-caps leaves every prompt of the
target recorded once or filed, none lost, none twice."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from remote.job.store.ledger import Ledger, LedgerError, PromptState
from remote.job.store.prompts import Prompt
from tests.unit.fakes import dataset


def P(pid: str, index: int = 0) -> Prompt:
    return Prompt(pid, index, [])


def test_a_prompt_goes_new_sent_held_done():
    led = Ledger()
    led.send("a")
    assert led.state("a") == PromptState.SENT and list(led.sent) == ["a"]
    led.answered("a")
    assert led.state("a") == PromptState.HELD
    led.recorded("a")
    assert led.state("a") == PromptState.DONE and "a" in led.done and not led.sent


@pytest.mark.parametrize(
    "steps, bad",
    [
        (["send"], "send"),  # sent twice
        ([], "answered"),  # answered, never sent
        (["send"], "recorded"),  # recorded without being answered
        (["send", "answered", "recorded"], "fail"),  # failed once recorded
        (["send", "answered", "recorded"], "send"),  # asked again once recorded
        ([], "unfail"),
    ],
)
def test_a_transition_from_the_wrong_state_is_refused(steps, bad):
    led = Ledger()
    for s in steps:
        getattr(led, s)("a")
    before = led.state("a")
    with pytest.raises(LedgerError, match="prompt a"):
        getattr(led, bad)("a")
    assert led.state("a") == before  # refused: nothing changed


def test_requeue_waits_for_its_time_and_comes_back_new():
    led = Ledger()
    led.send("a")
    led.requeue(P("a"), not_before=10.0)
    assert led.state("a") == PromptState.QUEUED and led.next_due_at() == 10.0
    assert led.due(9.0) is None
    assert led.due(10.0).id == "a" and led.state("a") == PromptState.NEW
    with pytest.raises(LedgerError):
        led.requeue(P("b"), 0.0)  # never sent: only kept answers are queued from new


def test_kept_answers_queue_from_new_as_partial_and_recording_clears_it():
    led = Ledger()
    led.requeue(P("a"), 0.0, partial=True)
    assert led.partial == {"a"} and led.state("a") == PromptState.QUEUED
    led.send(led.due(0.0).id)
    led.answered("a")
    led.recorded("a")
    assert led.partial == set()


def test_settle_queues_a_cut_request_again_and_leaves_an_outcome_alone():
    led = Ledger()
    led.send("a")
    led.settle(P("a"))  # cancelled: asked again (the property test below found it lost before)
    assert led.state("a") == PromptState.QUEUED and led.due(0.0).id == "a"
    led.send("a")
    led.answered("a")
    led.settle(P("a"))  # answered meanwhile: its line waits for the disk, it is not lost
    assert led.state("a") == PromptState.HELD


def test_counts_per_prompt():
    led = Ledger()
    assert [led.failed_attempt("a") for _ in range(3)] == [1, 2, 3]
    assert led.went_away("a") == 1
    led.turn_answered("a")
    assert "a" not in led.attempts and led.requeues["a"] == 1


def test_views_are_read_only():
    led = Ledger(done=["x"])
    with pytest.raises(AttributeError):
        led.done.add("y")  # the ledger's methods are the only way in
    assert len(led.done) == 1 and led.state("x") == PromptState.DONE


class JobMachine(RuleBasedStateMachine):
    """One dataset's run driven at random, with the records on 'disk' kept apart from the ledger:
    a kill throws the ledger away and resumes from the disk, as a restart does."""

    N = 12

    def __init__(self):
        super().__init__()
        self.disk: list[str] = []  # record ids, in the order written
        self.filed: set[str] = set()  # ids in the errors file (in this run)
        self.now = 0.0
        self.run = dataset("B1", self.N)
        self.target = self.N

    def _sent(self) -> list[str]:
        return sorted(self.run.ledger.sent)

    @rule()
    def send_next(self):
        p = self.run.next_prompt(self.now)
        if p is not None:
            self.run.ledger.send(p.id)

    @precondition(lambda self: self.run.ledger.sent)
    @rule(pick=st.integers(0, 100), outcome=st.sampled_from(["answer", "retry", "away", "fail"]))
    def outcome(self, pick, outcome):
        sent = self._sent()
        pid = sent[pick % len(sent)]
        p = self.run.prompts[self.run.prompts.ids.index(pid)]
        led = self.run.ledger
        if outcome == "answer":
            led.answered(pid)
            self.disk.append(pid)  # the line is on disk before the ledger says done
            self.run.record_done(p, 1)
        elif outcome == "retry":
            if led.failed_attempt(pid) > 3:
                led.fail(pid)
                self.filed.add(pid)
            else:
                led.requeue(p, self.now + 1.0)
        elif outcome == "away":
            led.went_away(pid)
            led.requeue(p, self.now)
        else:
            led.fail(pid)
            self.filed.add(pid)

    @precondition(lambda self: self.run.ledger.sent)
    @rule(pick=st.integers(0, 100))
    def cancelled(self, pick):
        sent = self._sent()
        pid = sent[pick % len(sent)]
        self.run.ledger.settle(self.run.prompts[self.run.prompts.ids.index(pid)])

    @rule(dt=st.floats(0.0, 2.0))
    def time_passes(self, dt):
        self.now += dt

    @rule(n=st.integers(0, N))
    def recap(self, n):
        self.target = n
        self.run.set_target(n, None)

    @rule()
    def kill_and_resume(self):
        """kill -9: what was in flight or queued is gone; the records on disk say what is done;
        failures are asked again (a restart retries them)."""
        self.run = dataset("B1", self.N, done=self.disk)
        self.run.set_target(self.target, None)
        self.filed = set()

    @invariant()
    def never_twice_and_each_prompt_in_one_state(self):
        assert len(self.disk) == len(set(self.disk)), "a prompt recorded twice"
        led = self.run.ledger
        states = [
            set(led.ids(s))
            for s in (
                PromptState.QUEUED,
                PromptState.SENT,
                PromptState.HELD,
                PromptState.DONE,
                PromptState.FAILED,
            )
        ]
        assert sum(len(s) for s in states) == len(set().union(*states))
        assert set(led.done) == set(self.disk)
        target_ids = self.run.prompts.ids[: self.target]
        assert self.run.done_in_target == sum(1 for i in target_ids if i in set(self.disk))

    def teardown(self):
        """Never lost: carried on to the end (no more faults), every prompt of the target ends
        recorded or filed."""
        led = self.run.ledger
        for _ in range(10 * self.N):
            for pid in self._sent():
                led.answered(pid)
                self.disk.append(pid)
                self.run.record_done(self.run.prompts[self.run.prompts.ids.index(pid)], 1)
            self.now += 10.0
            p = self.run.next_prompt(self.now)
            if p is None and not self.run.has_work():
                break
            if p is not None:
                led.send(p.id)
        target_ids = set(self.run.prompts.ids[: self.target])
        assert target_ids <= set(self.disk) | self.filed, "a prompt of the target was lost"
        assert len(self.disk) == len(set(self.disk)), "a prompt recorded twice"


JobMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_the_ledger_never_loses_a_prompt_and_never_records_one_twice = JobMachine.TestCase
