"""The watcher's runner keeper alone, on a host folder in tmp: a runner that ended by its own verdict
is left alone; one that died is restarted after its backoff, until the budget is spent, then the
job fails with the cause. No process is started: the start itself is the end-to-end tests'."""

from __future__ import annotations

import json
import subprocess
import sys

from remote.common.codec import write_json
from remote.common.jobspec import Paths
from remote.common.recover import RecoverSpec
from remote.common.state import RunnerWanted
from remote.common.status import JobState, JobStatus, ProcessState
from remote.host.facts import intent
from remote.host.watcher.keepers import RunnerKeeper


def dead_runner(paths: Paths, state: str) -> int:
    """A pid file for a process that is gone, and the status it left."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    paths.ensure()
    write_json(paths.pidfile, {"pid": p.pid, "start_time": 1, "token": "t"})
    write_json(paths.status, JobStatus(state=state, pid=p.pid).to_dict())
    return p.pid


def keeper(tmp_path, **spec):
    paths, told, lines = Paths(tmp_path), [], []
    k = RunnerKeeper(
        paths, RecoverSpec(**dict(dict(backoff=10.0), **spec)), told.append, lines.append
    )
    return k, paths, told, lines


def test_a_runner_that_finished_by_itself_is_not_restarted(tmp_path):
    k, paths, _, lines = keeper(tmp_path)
    paths.ensure()
    intent.change(paths, runner={"wanted": True, "argv": []})
    dead_runner(paths, JobState.FINISHED)
    k.tick(100.0, RunnerWanted(wanted=True))
    assert k.seen.state == ProcessState.IDLE and not intent.read(paths).runner.wanted
    assert "finished by itself" in lines[-1]


def test_a_runner_that_died_waits_its_backoff_then_the_budget_runs_out(tmp_path):
    k, paths, _, lines = keeper(tmp_path, max_restarts=2)
    pid = dead_runner(paths, JobState.RUNNING)
    k.tick(100.0, RunnerWanted(wanted=True))
    assert (
        k.seen.state == ProcessState.BACKOFF and k.seen.next_try_at == 110.0 and k.seen.attempt == 1
    )
    assert f"pid {pid}" in k.seen.why and "OOM killer" in k.seen.why
    k.budget.restarting(110.0)  # what its start does first
    k._died(120.0, "again", [])
    assert k.seen.state == ProcessState.BACKOFF and k.seen.next_try_at == 140.0  # doubled
    k.budget.restarting(140.0)
    assert k._died(150.0, "and again", ["oom-kill"]) is False
    assert k.seen.state == ProcessState.FATAL and k.seen.log == ["oom-kill"]
    events = [json.loads(line)["event"] for line in paths.recover_log.read_text().splitlines()]
    assert events == ["died", "died", "died", "gave_up"]
