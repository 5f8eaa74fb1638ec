"""The job's verdict, set once for the whole status: whoever says it, nothing is left running."""

from __future__ import annotations

from remote.common.status import DatasetState, DatasetStatus, JobState, JobStatus


def test_a_verdict_leaves_nothing_running_or_on_its_way():
    st = JobStatus(
        state=JobState.RUNNING,
        in_flight=7,
        eta_s=52,
        tokens_per_s=900.0,
        stalled=True,
        mean_tokens_per_s=800.0,
        datasets={
            "BIG": DatasetStatus(DatasetState.RUNNING, 83, 400, in_flight=7, eta_s=52),
            "B2": DatasetStatus(DatasetState.COMPLETE, 5, 5),
            "B3": DatasetStatus(DatasetState.PENDING, 0, 9, eta_s=80),
        },
    )
    assert st.end(JobState.STOPPED, "stopped by signal", at=12.0) is st
    assert (st.state, st.message, st.updated_at) == ("stopped", "stopped by signal", 12.0)
    assert (st.in_flight, st.eta_s, st.stalled) == (0, None, False)
    assert (st.tokens_per_s, st.mean_tokens_per_s) == (900.0, 800.0)  # how it went stays said
    states = {n: d.state for n, d in st.datasets.items()}
    assert states == {"BIG": "stopped", "B2": "complete", "B3": "pending"}
    assert all(d.eta_s is None and d.in_flight == 0 for d in st.datasets.values())
    assert st.datasets["BIG"].done == 83  # counts are facts, not states


def test_a_dataset_its_budget_ended_short_says_so():
    short = DatasetStatus(DatasetState.COMPLETE, 276, 300, budget=700_000, budget_reached=True)
    assert short.state_label == "budget reached"
    whole = DatasetStatus(DatasetState.COMPLETE, 300, 300, budget=700_000, budget_reached=True)
    assert whole.state_label == "complete"  # every prompt answered: nothing to explain


def test_a_datasets_state_is_one_rule_for_every_stage():
    S = DatasetState

    def of(**kw):
        base = dict(done=3, target=10, left=True, in_flight=0, failed=0, busy=False)
        return S.of(**{**base, **kw})

    assert of() == S.PENDING and of(busy=True) == S.RUNNING and of(in_flight=2) == S.RUNNING
    assert of(done=10) == S.COMPLETE and of(budget_reached=True) == S.COMPLETE
    assert of(budget_reached=True, in_flight=1) == S.RUNNING  # its answers in flight still count
    assert (
        of(left=False, failed=1) == S.INCOMPLETE
        and of(left=False, failed=1, in_flight=1) == S.RUNNING
    )
    assert (
        of(left=False, busy=True) == S.RUNNING
    )  # nothing left, nothing failed: its last in writing


def test_a_job_whose_runner_the_watcher_starts_again_is_said_recovering_not_stopped():
    from remote.common.status import GONE, JobView, ProcessWatch, Supervision

    def job(state, runner=None, supervised=True):
        sup = Supervision(supervised=supervised, runner=runner)
        return JobView(state=state, supervision=sup)

    backoff = ProcessWatch(state="backoff", attempt=1, of=5)
    assert job("stopped", backoff).state_label == "recovering"
    assert job("failed", ProcessWatch(state="starting")).state_label == "recovering"
    assert job("stopped", ProcessWatch(state="fatal")).state_label == "stopped"  # given up: the end
    assert job("stopped", backoff, supervised=False).state_label == "stopped"  # no watcher to do it
    assert (
        job("running", backoff).state_label == "running"
        and job("finished").state_label == "finished"
    )
    assert JobView(state="stopped").state_label == "stopped"
    # runner and watcher both killed (-9): nobody stopped it, nobody starts it again
    gone = JobView(state="stopped", message=GONE, supervision=Supervision(supervised=False))
    assert gone.state_label == "died"
    gone.supervision = Supervision(supervised=True, runner=backoff)
    assert gone.state_label == "recovering"  # the watcher at work says what comes


def test_a_restart_under_way_on_the_host_and_a_drain_are_said_as_such():
    """Ctrl-C on `restart --drain --hard` detaches; the host drains, stops and starts on its own.
    status said `running` through the drain and `recovering` between the stop and the start (the
    watcher's word for a death)."""
    from remote.common.status import JobView, ProcessWatch, Supervision

    sup = Supervision(enabled=True, supervised=True, runner=ProcessWatch(state="watching"))
    gap = JobView(state="stopped", supervision=sup)
    assert gap.state_label == "recovering"  # a runner gone, which the watcher keeps
    sup.restarting = True  # a restart holds the job, between its stop and its start
    assert gap.state_label == "restarting" and not gap.job_ended and gap.ending
    assert JobView(state="running", draining=True).state_label == "draining"
    assert JobView(state="running", draining=True, stopping=30.0).state_label == "stopping"
    # the stop a restart makes: its grace (or its drain) is said as the restart, a start follows
    for how in ({"stopping": 30.0}, {"draining": True}):
        view = JobView(state="running", supervision=sup, **how)
        assert view.state_label == "restarting" and view.ending  # no ETA to wait for
    assert JobView(state="running", supervision=sup).state_label == "running"  # not its stop yet


def test_a_process_given_up_on_stays_so_until_a_new_watch():
    import pytest

    from remote.common.status import ProcessState, ProcessStateError, ProcessWatch

    w = ProcessWatch()
    w.move(ProcessState.BACKOFF, why="died", next_try_at=5.0)
    assert (w.state, w.why, w.next_try_at) == ("backoff", "died", 5.0)
    w.move(ProcessState.STARTING)
    assert w.next_try_at is None  # a time to try again belongs to a backoff only
    w.move(ProcessState.FATAL, why="gave up")
    for to in (ProcessState.WATCHING, ProcessState.IDLE, ProcessState.BACKOFF):
        with pytest.raises(ProcessStateError, match=f"fatal -> {to}"):
            w.move(to)
    assert w.state == "fatal"
    with pytest.raises(TypeError, match="no field wy"):
        ProcessWatch().move(ProcessState.IDLE, wy="typo")
    unknown = ProcessWatch(state="paused")  # another release's word, read from its file
    unknown.move(ProcessState.IDLE)
    assert unknown.state == "idle"


def test_status_json_holds_the_runners_words_and_a_look_adds_the_rest(tmp_path):
    import json

    from remote.common.status import JobView, Supervision

    path = tmp_path / "status.json"
    JobStatus(state="running", pid=7).write(path)
    looked_up = {"runner", "current_release", "strays", "supervision", "host", "deployed_job"}
    assert not looked_up & set(json.loads(path.read_text()))  # the file is the runner's only
    view = JobView(**vars(JobStatus.read(path)), supervision=Supervision(supervised=True))
    assert (view.state, view.pid, view.supervision.supervised) == ("running", 7, True)


def test_status_json_is_stale_past_stale_after_while_the_job_has_not_ended():
    """The one rule every view says it by: a runner rewrites status.json every second."""
    from remote.common.status import STALE_AFTER, JobStatus

    st = JobStatus(state="running", updated_at=1_000.0)
    assert st.stale_for(1_000.0 + STALE_AFTER) is None
    assert st.stale_for(1_000.0 + STALE_AFTER + 5) == STALE_AFTER + 5
    assert JobStatus(state="running").stale_for(1e9) is None  # never written: nothing to age
    st.state = "failed"  # a verdict is never rewritten
    assert st.stale_for(1e9) is None


def test_answers_in_flight_are_a_runners_own_and_a_killed_runners_none():
    from remote.common.status import GONE, DatasetStatus, JobStatus

    busy = {"B1": DatasetStatus(in_flight=2), "B2": DatasetStatus()}
    st = JobStatus(state="running", pid=9, datasets=busy)
    assert st.answering(9) == {"B1"} and st.answering(8) == frozenset() == st.answering(None)
    assert st.gone_unless(True).state == "running"
    st.gone_unless(False)
    assert (st.state, st.message, st.answering(9)) == ("stopped", GONE, frozenset())
