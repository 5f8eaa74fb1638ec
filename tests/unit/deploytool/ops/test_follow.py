"""When tail's watch is over: a finished stage that the watcher is to follow with another is not."""

from __future__ import annotations


def test_tail_waits_past_a_finished_draft_whose_baseline_the_watcher_starts():
    from deploytool.ops.follow import exit_code
    from remote.common.caps import Caps
    from remote.common.status import JobView, Supervision

    def draft(state="finished", baseline=True, supervised=True, ticked=5.0, nxt=None):
        caps = Caps(stage="draft", baseline=baseline).to_dict()
        sup = Supervision(supervised=supervised, ticked_at=ticked, next_stage=nxt)
        return JobView(state=state, caps=caps, updated_at=10.0, supervision=sup)

    assert exit_code([draft()]) is None  # the watcher has not looked since the verdict
    assert exit_code([draft(ticked=11.0, nxt="baseline")]) is None  # it is starting it
    # it looked after the verdict and starts nothing (an older watcher, a stop typed meanwhile)
    assert exit_code([draft(ticked=11.0)]) == 0
    assert exit_code([draft(baseline=False)]) == 0
    assert exit_code([draft(supervised=False)]) == 0  # no watcher to start it: the end, said
    assert exit_code([draft(ticked=None)]) == 0  # a watcher of an older release starts none
    assert exit_code([draft(state="failed")]) == 1
    assert exit_code([draft(state="stopped")]) == 1


def test_a_host_whose_look_misses_its_deadline_is_said_unreachable_and_holds_no_other_up():
    """Time rules on an injected clock: a look unanswered for the deadline makes its host
    `unreachable since` the look was sent, the others' looks go on being taken (none waits on
    it again), and its late answer is the host back."""
    from concurrent.futures import Future

    from deploytool.config import HostConfig
    from deploytool.ops.follow import HostWatch, clock_time, look_all
    from remote.common.status import DatasetStatus, JobView

    class Clock:
        t = 1_764_500_000.0

        def __call__(self):
            return self.t

    clock, hung = Clock(), Future()
    waited: list[float] = []

    def wait(looks, timeout):  # time passes only on the injected clock
        waited.append(timeout)
        clock.t += timeout

    def view(done: int) -> JobView:
        return JobView(state="running", datasets={"B1": DatasetStatus(done=done, target=24)})

    class Looks:  # the kept `ctl status`, as the watch asks it
        def __init__(self):
            self.done = 0

        def ask(self):
            self.done += 1
            return view(self.done)

    def answered(name, fn):
        fut = Future()
        fut.set_result(fn())
        return fut

    quick = HostWatch(HostConfig(name="gpu1"), None, asking=Looks(), run_look=answered)
    slow = HostWatch(HostConfig(name="gpu2"), None, asking=Looks(), run_look=answered)
    look_all([quick, slow], clock, deadline=10.0, wait=wait)
    assert slow.status.datasets["B1"].done == 1 and slow.note is None and waited == []
    sent = clock.t
    slow.run_look = lambda name, fn: hung  # its disk stalls: the look never answers
    look_all([quick, slow], clock, deadline=10.0, wait=wait)
    assert waited == [10.0]  # the deadline, waited once
    assert slow.note == f"unreachable since {clock_time(sent)}: its look has not answered in 10s"
    assert slow.status.datasets["B1"].done == 1  # its last view kept on screen
    for n in (3, 4):  # the others go on, and nobody waits on the hung look again
        clock.t += 1.0
        look_all([quick, slow], clock, deadline=10.0, wait=wait)
        assert quick.status.datasets["B1"].done == n and quick.note is None
        assert waited == [10.0] and slow.note.startswith(f"unreachable since {clock_time(sent)}")
    hung.set_result(view(24))  # it answers again
    clock.t += 1.0
    look_all([quick, slow], clock, deadline=10.0, wait=wait)
    assert slow.status.datasets["B1"].done == 24 and slow.note is None and slow.down_since is None


def test_a_look_that_answers_within_its_deadline_is_no_trouble():
    from concurrent.futures import Future
    from types import SimpleNamespace

    from deploytool.config import HostConfig
    from deploytool.ops.follow import HostWatch, look_all
    from remote.common.status import JobView

    t = [0.0]
    late = Future()

    def wait(looks, timeout):  # 9.9 s pass, then the answer comes
        t[0] += 9.9
        late.set_result(JobView(state="running"))

    asking = SimpleNamespace(ask=None)  # the look itself stands in: `late`
    w = HostWatch(HostConfig(name="gpu1"), None, asking=asking, run_look=lambda n, f: late)
    look_all([w], lambda: t[0], deadline=10.0, wait=wait)
    assert w.status.state == "running" and w.note is None and w.down_since is None


def test_tail_knows_hosts_yaml_differs_from_the_deployed_job_as_status_does():
    """`job_differs` was set for `invoke status` only: tail's looks set it from the same config."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from deploytool.config import HostConfig
    from deploytool.ops.follow import HostWatch, look_all
    from remote.common.status import JobView

    job = SimpleNamespace(fingerprint=lambda: "edited")
    config = SimpleNamespace(job_for=lambda host: job, hosts_only=False)

    def look(deployed):
        def run_look(name, fn):
            fut = Future()
            fut.set_result(JobView(state="running", deployed_job=deployed))
            return fut

        return run_look

    w = HostWatch(HostConfig(name="gpu1"), config, asking=SimpleNamespace(ask=None))
    for deployed, differs in (("deployed", True), ("edited", False), (None, False)):
        w.run_look = look(deployed)
        look_all([w], lambda: 0.0, deadline=10.0)
        assert w.status.job_differs is differs, deployed
