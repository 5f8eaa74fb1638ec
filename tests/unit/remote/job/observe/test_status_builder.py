"""status.json's progress from the datasets' runs: per dataset where it stands, and ETAs that add up
in job order (datasets run one after another)."""

from __future__ import annotations

from remote.common.jobspec import DatasetSpec
from remote.common.status import DatasetState, JobState
from remote.job.observe.status_builder import Progress, progress, stalled
from tests.unit.fakes import dataset


class Job:
    def __init__(self, *names):
        self.datasets = [DatasetSpec(n, f"data/{n}.jsonl", 100) for n in names]


def finish(run, k: int, tokens: int, now: float) -> None:
    for _ in range(k):
        p = run.next_prompt(now)
        run.ledger.send(p.id)
        run.ledger.answered(p.id)
        run.record_done(p, tokens)
        run.tokens.add(now, tokens)


def test_each_dataset_in_job_order_and_the_etas_accumulate():
    b1, b2 = dataset("B1", n=10), dataset("B2", n=10)
    finish(b1, 5, 1200, now=65.0)
    p = progress(Job("B1", "B2"), {"B2": b2, "B1": b1}, now=70.0, started=0.0, first=5.0)
    assert list(p.datasets) == ["B1", "B2"]
    one, two = p.datasets["B1"], p.datasets["B2"]
    assert (one.done, one.target, one.mean_tokens, one.state) == (5, 10, 1200.0, JobState.RUNNING)
    assert (
        one.remaining_tokens == 5 * 1200 and two.remaining_tokens == 10 * 100
    )  # est until measured
    assert p.tokens_per_s == 100.0 == one.tokens_per_s  # 6000 tokens over the last minute
    assert (one.eta_s, two.eta_s) == (60, 70)  # B2 starts after B1: its ETA counts B1 in
    assert p.line() == "done 5/20, 6,000 tokens, ETA 0h01m"


def test_a_complete_dataset_has_nothing_left_and_a_budget_caps_what_remains():
    b1, b2 = dataset("B1", n=2), dataset("B2", n=10)
    finish(b1, 2, 50, now=1.0)
    b2.set_target(None, budget=300)
    p = progress(Job("B1", "B2"), {"B1": b1, "B2": b2}, now=2.0, started=0.0)
    assert p.datasets["B1"].state == DatasetState.COMPLETE and p.datasets["B1"].eta_s == 0
    assert p.datasets["B2"].remaining_tokens == 300 and p.datasets["B2"].budget == 300


def test_stalled_only_while_running_with_requests_out():
    assert stalled(JobState.RUNNING, 2, last_completion=0.0, now=301.0, after=300.0)
    assert not stalled(JobState.RUNNING, 0, 0.0, 301.0, 300.0)
    assert not stalled(DatasetState.COMPLETE, 2, 0.0, 301.0, 300.0)
    assert Progress({}, 0.0, 0.0, 100.0).eta_s is None


def test_a_young_runner_writes_no_rate_and_reckons_its_etas_at_the_jobs_mean_where_faster():
    """The rate counts finished answers, the first an answer's length after the start: until the
    window has been full of answers the rate would say a fraction of the speed (155 tok/s after a
    restart of a job that made 1.2k) and its ETAs hours for minutes of work. It is written as 0, so
    the views show the job's mean, starred; the ETAs take that mean, whatever time it was measured
    over (the job's earlier runs), where it is the faster."""
    from remote.job.store.rates import ActiveTime

    b1 = dataset("B1", n=10)
    finish(b1, 1, 100, now=40.0)  # its first answer, 40 s after the start
    job = Job("B1")
    ran = ActiveTime(seconds=600.0, tokens=540_000)  # 900 tok/s over ten minutes of earlier runs

    def eta(now, ran=ran, first=40.0):
        return progress(job, {"B1": b1}, now=now, started=0.0, ran=ran, first=first)

    young = eta(41.0)
    assert young.tokens_per_s == 0.0 == young.datasets["B1"].tokens_per_s  # 2.4 of its own
    assert young.datasets["B1"].eta_s == 1 and young.eta_s == 1  # 900 tokens at 900/s
    assert eta(61.0).datasets["B1"].eta_s == 1  # past the start's minute, not its answers'
    assert eta(41.0, first=None).datasets["B1"].eta_s == 1  # nothing finished yet
    slow = eta(41.0, ran=ActiveTime(600.0, 600))
    assert slow.datasets["B1"].eta_s == int(900 / (100 / 41))  # its own rate, the faster
    short = eta(
        1.0, ran=ActiveTime(30.0, 27_000), first=None
    )  # a first run of 30 s, then a restart
    assert short.eta_s == 1  # no "ETA ?" beside the mean the views show
    new = eta(41.0, ran=ActiveTime())  # a new job's first answer: no mean to show instead
    assert new.tokens_per_s == 2.4 and new.eta_s == int(900 / (100 / 41))
    old = eta(100.0)
    assert old.tokens_per_s == 1.7 == old.datasets["B1"].tokens_per_s  # a window of answers
    assert old.datasets["B1"].eta_s == int(900 / (100 / 60))  # its own


def test_what_is_left_is_reckoned_at_est_tokens_at_least_until_enough_answers_are_measured():
    """The first answers back are the short ones: three of 900 tokens do not say what the
    other 17 will take where est_tokens says 3,000 (the ETA read a third of what it took)."""
    b1 = dataset("B1", n=20, est_tokens=3000)
    finish(b1, 3, 900, now=10.0)
    p = progress(Job("B1"), {"B1": b1}, now=11.0, started=0.0)
    assert p.datasets["B1"].remaining_tokens == 17 * 3000
    finish(b1, 17, 900, now=20.0)  # all of them measured now: what they took
    assert progress(Job("B1"), {"B1": b1}, now=21.0, started=0.0).remaining_tokens == 0


def test_a_runner_that_streams_reckons_its_etas_at_what_streams_not_at_an_earlier_engines_mean():
    """A restart onto a slower engine: the job's mean (900 tok/s, the earlier engine's) said
    0m16s for 3m06s of work, starred as a guess and still wrong for its first minute. What streams
    is measured within seconds of the start, whatever the engine: the ETA is reckoned at it, and is
    not a guess."""
    from remote.job.store.rates import ActiveTime

    b1 = dataset("B1", n=10)
    finish(b1, 1, 100, now=40.0)
    ran = ActiveTime(seconds=600.0, tokens=540_000)  # 900 tok/s, the faster engine's
    job = Job("B1")
    guess = progress(job, {"B1": b1}, now=41.0, started=0.0, ran=ran, first=40.0)
    assert guess.guess and guess.eta_s == 1  # 900 tokens left at the mean
    streams = progress(
        job, {"B1": b1}, now=41.0, started=0.0, ran=ran, first=40.0, streamed_per_s=60.0
    )
    assert not streams.guess and streams.eta_s == 15  # 900 tokens at 60 tok/s
    assert streams.tokens_per_s == 0.0  # the rate shown is still the mean until a minute of answers


def test_answers_in_flight_count_what_they_made_and_the_last_one_runs_at_its_own_streams_speed():
    """The last long answer in flight read `ETA 0m00s` for 45 s: the job's pace (many streams) is
    not one stream's. What the answers in flight have streamed is taken off what is left, and no
    ETA is shorter than its longest answer needs at its own speed."""
    from remote.job.store.rates import Streaming

    b1 = dataset("B1", n=3)
    finish(b1, 2, 100, now=5.0)  # 100 expected of the third (est_tokens, under 50 measured)
    job = Job("B1")
    alone = Streaming(tokens=40, per_s=2.0)  # 60 tokens more at 2 tok/s: 30 s
    p = progress(
        job, {"B1": b1}, now=10.0, started=0.0, streaming={"B1": [alone]}, streamed_per_s=500.0
    )
    assert p.datasets["B1"].remaining_tokens == 60
    assert p.datasets["B1"].eta_s == 30 == p.eta_s  # not 60 / 500 = 0
    past = Streaming(tokens=150, per_s=2.0)  # longer than expected: nothing left to reckon
    q = progress(
        job, {"B1": b1}, now=10.0, started=0.0, streaming={"B1": [past]}, streamed_per_s=500.0
    )
    assert q.datasets["B1"].remaining_tokens == 0 and q.eta_s == 0  # the views say `finishing`
    assert Streaming(10, None).left_s(100) == 0.0  # not a second streamed: no speed to go by
