"""The watcher's runner keeper alone, on a host folder in tmp: a runner that ended by its own verdict
is left alone; one that died is restarted after its backoff, until the budget is spent, then the
job fails with the cause. No process is started: the start itself is the end-to-end tests'."""

from __future__ import annotations

import json
import subprocess
import sys

from remote.common import procinfo
from remote.common.codec import write_json
from remote.common.jobspec import Paths
from remote.common.recover import Observation, RecoverSpec
from remote.common.state import RunnerWanted, ServerRecord, ServerWanted, settle
from remote.common.status import JobState, JobStatus, ProcessState
from remote.host.facts import intent
from remote.host.watcher import keepers
from remote.host.watcher.keepers import RunnerKeeper, ServerKeeper


def dead_runner(paths: Paths, state: str) -> int:
    """A pid file for a process that is gone, and the status it left."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    paths.ensure()
    write_json(paths.pidfile, {"pid": p.pid, "start_time": 1, "token": "t"})
    write_json(paths.status, JobStatus(state=state, pid=p.pid).to_dict())
    return p.pid


def keeper(tmp_path, **spec):
    paths, notified, lines = Paths(tmp_path), [], []
    spec = RecoverSpec(**dict(dict(backoff=10.0), **spec))
    k = RunnerKeeper(paths, spec, lambda event, text: notified.append(event), lines.append)
    return k, paths, notified, lines


def decided_starts(k, monkeypatch) -> list[float]:
    """The keeper's starts, the decision only (the start itself is the end-to-end tests'): when
    each came, in a list filled as they come."""
    starts = []

    def start(now, want):
        starts.append(now)
        k.seen.attempt = k.budget.restarting(now)
        k._restarted(now)

    monkeypatch.setattr(k, "_start", start)
    return starts


def test_a_runner_that_finished_by_itself_is_not_restarted(tmp_path):
    k, paths, _, lines = keeper(tmp_path)
    paths.ensure()
    intent.change(paths, runner={"wanted": True})
    dead_runner(paths, JobState.FINISHED)
    k.tick(100.0, RunnerWanted(wanted=True))
    assert k.seen.state == ProcessState.IDLE and not intent.read(paths).runner.wanted
    assert "finished by itself" in lines[-1]


def test_a_runner_stopped_by_a_signal_not_of_deploytool_is_started_again_saying_so(
    tmp_path, monkeypatch
):
    k, paths, _, _ = keeper(tmp_path)
    monkeypatch.setattr(k, "_start", lambda now, want: None)
    pid = dead_runner(paths, JobState.STOPPED)
    st = JobStatus.read(paths.status)
    st.message = "stopped by SIGTERM, not by deploytool (someone's kill, a shutdown)"
    st.write(paths.status)
    k.tick(100.0, RunnerWanted(wanted=True))
    assert k.seen.last_cause == (
        f"the runner (pid {pid}) stopped by SIGTERM, not by deploytool (someone's kill, a shutdown)"
    )


def test_a_runner_that_died_comes_back_at_once_then_after_a_doubling_backoff(tmp_path, monkeypatch):
    k, paths, notified, lines = keeper(tmp_path, max_restarts=3)
    starts = decided_starts(k, monkeypatch)
    want = RunnerWanted(wanted=True)
    pid = dead_runner(paths, JobState.RUNNING)
    k.tick(100.0, want)
    assert starts == [100.0]  # the first death: started again in the tick that saw it
    assert f"pid {pid}" in k.seen.last_cause and "OOM killer" in k.seen.last_cause
    k._died(120.0, "again", [])  # the second within the window waits the backoff
    assert k.seen.state == ProcessState.BACKOFF and k.seen.next_try_at == 130.0
    k.tick(125.0, want)
    assert starts == [100.0]
    k.tick(130.0, want)
    assert starts == [100.0, 130.0]
    k._died(150.0, "and again", [])
    assert k.seen.next_try_at == 170.0  # doubled
    k.tick(170.0, want)
    why = k._died(180.0, "once more", ["oom-kill"])  # three restarts: the budget is spent
    assert why == "died again after 3 restarts within 3600s; gave up: once more"
    assert k.seen.state == ProcessState.FATAL and k.seen.log == ["oom-kill"]
    events = [json.loads(line)["event"] for line in paths.recover_log.read_text().splitlines()]
    assert events == [
        "died",
        "restarted",
        "died",
        "restarted",
        "died",
        "restarted",
        "died",
        "gave_up",
    ]
    assert notified == ["runner_restarted"] * 3


def test_a_server_killed_while_it_was_probed_is_called_gone_not_wedged(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    paths.ensure()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    rec = ServerRecord(pid=proc.pid, start_time=procinfo.start_time(proc.pid), port=1, ready_at=1.0)
    rec.write(paths.server_pid)
    k = ServerKeeper(paths, RecoverSpec(), lambda event, text: None, lambda line: None)
    causes = []
    monkeypatch.setattr(k, "_dead", lambda now, rec, cause, lines=None: causes.append(cause))
    monkeypatch.setattr(keepers.engines, "watch", lambda paths, rec: rec)

    class Wedged:  # its clock has run out: nothing answered for longer than wedged_after
        def observe(self, o):
            return "neither /metrics nor /v1/models answered for 7s"

    def probe(paths, rec, now):  # the kill -9 lands while the probes wait for an answer
        proc.kill()
        proc.wait()
        return Observation(now=now)

    monkeypatch.setattr(keepers, "observe", probe)
    k.clock, k.clock_of = Wedged(), proc.pid
    k.tick(100.0, ServerWanted(wanted=True))
    assert causes == [keepers.GONE]


def test_a_start_that_fails_the_same_way_twice_is_not_tried_a_third_time(tmp_path):
    """vLLM's CPU build refusing the extraction connector fails every start alike: restarting it
    five times over minutes only repeats the lines. Numbers (times, pids) aside, the same cause and
    lines twice in a row is a start that cannot work; a death after running, or another cause,
    goes on with the budget."""
    k, paths, _, _ = keeper(tmp_path, max_restarts=5)
    paths.ensure()
    cpu = "RuntimeError: pin_memory=True requires a CUDA or other accelerator backend"
    smoke = "the smoke test failed: HTTP Error 500"
    assert k._died(100.0, smoke, [f"01:00:01 (pid 4711) {cpu}"], at_start=True) is None
    why = k._died(130.0, smoke, [f"01:02:57 (pid 5120) {cpu}"], at_start=True)
    assert why == f"failed to start the same way twice in a row; gave up: {smoke}"
    assert k.seen.state == ProcessState.FATAL

    k, paths, _, _ = keeper(tmp_path / "other", max_restarts=5)
    paths.ensure()
    assert k._died(100.0, smoke, [cpu], at_start=True) is None
    assert k._died(130.0, "it died while loading", ["CUDA out of memory"], at_start=True) is None
    k._restarted(140.0)  # a start that worked: the next failure is news again
    assert k._died(300.0, "it died while loading", ["CUDA out of memory"], at_start=True) is None
    gone = "its process is gone"
    assert k._died(400.0, gone, [], at_start=False) is None  # deaths after running: the budget's
    assert k._died(500.0, gone, [], at_start=False) is None


def test_a_give_up_after_the_draft_finished_says_the_draft_finished_and_its_baseline_failed(
    tmp_path,
):
    from remote.common.caps import Caps

    paths = Paths(tmp_path)
    paths.ensure()
    draft = Caps(stage="draft", baseline=True).to_dict()
    JobStatus(state=JobState.FINISHED, stage="draft", caps=draft).write(paths.status)
    settle(paths, JobState.FAILED, "the server failed to start: CUDA out of memory")
    st = JobStatus.read(paths.status)
    assert st.state == JobState.FAILED and st.message == (
        "the draft stage finished; the baseline stage was not started: "
        "the server failed to start: CUDA out of memory"
    )
    JobStatus(state=JobState.RUNNING, stage="draft", caps=draft).write(paths.status)
    settle(
        paths, JobState.FAILED, "the runner died again"
    )  # the draft's own runner: the draft failed
    assert JobStatus.read(paths.status).message == "the runner died again"


def test_a_verdict_said_after_the_runner_is_gone_starts_only_where_it_may(tmp_path):
    """The status file's one writer besides the runner: a finished job stays finished when its
    server is given up on later; a stop's `stopped` is said over its own runner's running status
    alone; a next stage not started is said over the finished stage that asked for it."""
    from remote.common.caps import Caps

    paths = Paths(tmp_path)
    paths.ensure()
    JobStatus(state=JobState.FINISHED, pid=7, message="").write(paths.status)
    assert not settle(paths, JobState.FAILED, "the server died 5 times")
    assert not settle(paths, JobState.STOPPED, "killed", runner=7)
    assert not settle(paths, JobState.FINISHED, "no caps ask for a next stage")
    assert JobStatus.read(paths.status).state == JobState.FINISHED
    JobStatus(state=JobState.RUNNING, pid=7).write(paths.status)
    assert not settle(paths, JobState.STOPPED, "killed", runner=8)  # another's
    assert settle(paths, JobState.STOPPED, "killed after 5s grace", runner=7)
    assert JobStatus.read(paths.status).state == JobState.STOPPED
    assert settle(paths, JobState.FAILED, "the server died 5 times")
    assert JobStatus.read(paths.status).message == "the server died 5 times"
    draft = Caps(stage="draft", baseline=True).to_dict()
    JobStatus(state=JobState.FINISHED, stage="draft", caps=draft, message="ok").write(paths.status)
    assert settle(paths, JobState.FINISHED, "the job was stopped")
    st = JobStatus.read(paths.status)
    assert st.state == JobState.FINISHED and not st.follows
    assert st.message == "ok; the baseline stage was not started: the job was stopped"
    import os

    from remote.common import procinfo
    from remote.common.state import RunnerRecord

    me = os.getpid()  # a runner a restart started meanwhile: its status is its own
    RunnerRecord(pid=me, start_time=procinfo.start_time(me), token="t").write(paths.pidfile)
    JobStatus(state=JobState.STARTING, pid=me).write(paths.status)
    assert not settle(paths, JobState.FAILED, "the server died 5 times")
    assert JobStatus.read(paths.status).state == JobState.STARTING


def test_a_watcher_started_again_keeps_the_restart_budget_its_predecessor_spent(tmp_path):
    """A watcher killed and started again (by the runner) counts the restarts the window still
    holds since the last give-up and since a command last wanted the process: a fresh budget
    would restart a crash loop for ever. The last death, with no restart after it yet, is counted
    again when the new keeper finds the process dead, not twice."""
    import time

    paths = Paths(tmp_path)
    paths.ensure()
    now = time.time()

    def events(*rows):
        paths.recover_log.unlink(missing_ok=True)
        for at, what, event in rows:
            keepers.record_event(paths, what, event, "x")
            lines = paths.recover_log.read_text().splitlines()
            lines[-1] = json.dumps(dict(json.loads(lines[-1]), at=at))
            paths.recover_log.write_text("\n".join(lines) + "\n")

    events(
        (now - 300, "runner", "died"),
        (now - 290, "runner", "gave_up"),  # what came before a give-up is the old budget's
        (now - 100, "runner", "died"),
        (now - 90, "runner", "restarted"),
        (now - 50, "runner", "died"),
        (now - 45, "runner", "restarted"),
        (now - 40, "server", "died"),  # the other process's own
        (now - 20, "runner", "died"),  # in its backoff when the watcher was killed
    )
    k, *_ = keeper(tmp_path)
    assert k.budget.attempt(now) == 3  # two restarts spent: the next is the third
    assert keeper(tmp_path, window=60.0)[0].budget.attempt(now) == 2  # the window drops one
    intent.change(paths, runner={"wanted": True})  # a restart typed since: as at first
    assert keeper(tmp_path)[0].budget.attempt(time.time()) == 1


def test_what_the_watcher_does_about_a_runner_is_said_in_the_runners_log_too(tmp_path, monkeypatch):
    """One following runner.log (`tail --log`) sees why a runner ended and another began."""
    k, paths, _, lines = keeper(tmp_path)
    monkeypatch.setattr(k, "_start", lambda now, want: k._restarted(now))
    paths.ensure()
    paths.log.write_bytes(b"2026-12-05 10:00:00 runner start pid 1\n")
    pid = dead_runner(paths, JobState.RUNNING)
    k.tick(100.0, RunnerWanted(wanted=True))
    log_lines = paths.log.read_text().splitlines()
    assert log_lines[0] == "2026-12-05 10:00:00 runner start pid 1"  # the runner's own lines stay
    watcher = [line.split(" ", 2)[2] for line in log_lines[1:]]
    assert watcher == [f"[watcher] {line}" for line in lines] and len(watcher) == 2
    assert f"runner: the runner (pid {pid}) died" in watcher[0]
    assert watcher[1].startswith("[watcher] runner restarted (attempt 1 of 5) after:")


def test_why_a_runner_died_is_never_the_watchers_own_line_in_its_log(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    paths.log.write_text(
        "2026-12-05 10:00:00 runner start pid 1\n"
        "2026-12-05 10:00:01 RuntimeError: the runner's own error\n"
        "2026-12-05 10:05:00 [watcher] server: the smoke test failed: HTTP Error 500\n"
    )
    assert keepers.reason_lines(paths.log) == [
        "2026-12-05 10:00:01 RuntimeError: the runner's own error"
    ]


def test_the_wedge_clock_counts_the_runners_requests_by_status_jsons_one_rule(
    tmp_path, monkeypatch
):
    """A status.json the views still call current speaks for the requests inside the server; the
    watcher dropped them at 15 s, the views call it stale at STALE_AFTER (30 s)."""
    from remote.common.status import STALE_AFTER, EndpointStatus

    paths = Paths(tmp_path)
    paths.ensure()
    monkeypatch.setattr(keepers.server_process, "get_url", lambda url, timeout: (200, ""))
    ep = EndpointStatus(url="http://127.0.0.1:8000/v1", in_flight=3, last_token_at=90.0)
    JobStatus(state="running", updated_at=100.0, endpoints=[ep]).write(paths.status)
    rec = ServerRecord(pid=1, port=8000)
    for age, counted in ((20.0, 3), (STALE_AFTER, 3), (STALE_AFTER + 1, 0)):
        o = keepers.observe(paths, rec, 100.0 + age)
        assert o.runner_in_flight == counted, age
        st = JobStatus.read(paths.status)
        assert st.fresh(100.0 + age) is bool(counted)  # the rule status and tail say it by


def test_a_runner_started_by_a_command_in_a_backoff_and_killed_is_a_death_of_its_own(
    tmp_path, monkeypatch
):
    """Runner 28261 died; the watcher waited its backoff; `invoke restart` started 28285, killed
    with -9 at once. The watcher's restart then said `after: the runner (pid 28261) died`, and
    28285's death was in no log, no recover.jsonl, no report."""
    k, paths, _, lines = keeper(tmp_path, max_restarts=5)
    decided_starts(k, monkeypatch)
    want = RunnerWanted(wanted=True)
    first = dead_runner(paths, JobState.RUNNING)
    k.tick(100.0, want)
    k._died(110.0, f"the runner (pid {first}) died again", [])  # now in a backoff
    assert k.seen.state == ProcessState.BACKOFF
    second = dead_runner(paths, JobState.RUNNING)  # a command's runner, killed in the backoff
    k.tick(111.0, want)
    assert f"pid {second}" in k.seen.last_cause
    died = [json.loads(x) for x in paths.recover_log.read_text().splitlines()]
    assert [e["event"] for e in died].count("died") == 3 and f"pid {second}" in died[-1]["why"]
    k.tick(k.seen.next_try_at, want)
    assert f"after: the runner (pid {second})" in lines[-1]


def test_the_restarts_status_counts_are_those_since_a_command_last_started_it(tmp_path):
    """`runner restarted 1x by the watcher` after three restarts: the count was this watcher's own,
    reset when it was started again. Counted from run/recover.jsonl since the command's start,
    whichever watcher made them, and never those before that start."""
    import time

    from remote.common.answers import RecoverEvent
    from remote.common.codec import note_line
    from remote.common.state import record_event

    paths = Paths(tmp_path)
    paths.ensure()
    note_line(paths.recover_log, RecoverEvent(1.0, "runner", "restarted", "before the command"))
    intent.change(paths, runner={"wanted": True})
    for why in ("killed", "the runner (pid 9) died"):
        record_event(paths, "runner", "died", why)
        record_event(paths, "runner", "restarted", why)
    record_event(paths, "server", "restarted", "another process's")
    k, _, _, _ = keeper(tmp_path)  # a watcher started again after a kill
    assert k.seen.restarts == 2
    assert k.seen.last_cause == "the runner (pid 9) died"  # `last cause: None` before
    k.seen.why = "killed"
    k._restarted(time.time())
    assert k.seen.restarts == 3
    # a restart typed: none since (it read `1x … since a command last started it` after one)
    k.recount(intent.read(paths).runner)
    assert k.seen.restarts == 3  # nothing changed: nothing counted anew
    intent.change(paths, runner={"wanted": True})
    k.recount(intent.read(paths).runner)
    assert k.seen.restarts == 0
