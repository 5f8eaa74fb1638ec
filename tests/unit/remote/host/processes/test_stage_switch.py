"""The server swap's decisions, piece by piece: which stage a running server cannot serve, whether a
restart needs a swap (the server's state through a stand-in), a stop typed since it began, the swap
before kept for the laptop that still follows it, and a give-up from inside the watcher's lock. The
swap carried out for real (a detached process, a fake vLLM, kills): test_draft_stage."""

from __future__ import annotations

import dataclasses
import time

import pytest

from remote.common.answers import ServerState
from remote.common.jobspec import Paths, ServerSpec
from remote.common.protocol import CtlRestart
from remote.common.state import StageSwitch
from remote.common.status import SwitchStep
from remote.common.wire import Fault, HostFault
from remote.host.facts import intent
from remote.host.processes import server_process, stage_switch
from remote.host.processes.stage_switch import wrong_for_stage

DRAFTED = ServerSpec(
    model="m",
    command="true",  # a program the host has: the swap's check that it can start passes
    draft={"model": "d", "method": "eagle3", "num_speculative_tokens": 3},
)


def test_a_server_serves_a_stage_only_with_that_stages_flags():
    plain = ServerSpec(model="m")
    assert wrong_for_stage(plain, None, extracting=True, drafting=False) is None  # no stage asked
    assert wrong_for_stage(plain, "generate", False, False) is None
    assert "without the extraction config" in wrong_for_stage(plain, "hidden-states", False, False)
    assert "with the hidden-states extraction" in wrong_for_stage(plain, "generate", True, False)
    assert "without the draft" in wrong_for_stage(plain, "draft", False, False)
    assert "with the draft stage's draft" in wrong_for_stage(plain, "baseline", False, True)
    assert wrong_for_stage(plain, "draft", False, True) is None
    # a speculative config of the user's own in server.args is theirs: no stage changes it
    own = ServerSpec(model="m", args=("--speculative-config", "{}"))
    assert wrong_for_stage(own, "baseline", False, True) is None


def _serving(monkeypatch, state: ServerState) -> None:
    monkeypatch.setattr(server_process, "server_state", lambda paths, req=None: state)


def test_a_restart_needs_a_swap_only_where_the_server_cannot_serve_its_stage(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    paths.ensure()
    _serving(monkeypatch, ServerState(up=True, ready=True))
    assert stage_switch.needed(paths, CtlRestart(stage="draft")) is None  # not the restart's server
    assert stage_switch.needed(paths, CtlRestart(stage="generate", server=DRAFTED)) is None
    sw = stage_switch.needed(paths, CtlRestart(stage="draft", server=DRAFTED))
    assert (sw.stage, sw.restart_server, sw.serves_before) == ("draft", True, "generate")
    assert sw.why == "runs without the draft the draft stage measures"
    assert "--speculative-config" in sw.spec.args and sw.base == DRAFTED
    # down: started for the stage, nothing to stop first
    _serving(monkeypatch, ServerState(up=False))
    sw = stage_switch.needed(paths, CtlRestart(stage="generate", server=DRAFTED))
    assert (sw.why, sw.restart_server, sw.spec) == (None, False, DRAFTED)
    # a server the host has nothing to run: refused before anything is stopped
    nothing = dataclasses.replace(DRAFTED, command=str(tmp_path / "no-vllm"))
    with pytest.raises(HostFault, match="no-vllm' not found on the host"):
        stage_switch.needed(paths, CtlRestart(stage="generate", server=nothing))
    # --no-server keeps a down server down: refused, unless --force
    with pytest.raises(HostFault, match="--no-server keeps it down"):
        stage_switch.needed(paths, CtlRestart(server=DRAFTED, keep_server=True))
    assert (
        stage_switch.needed(paths, CtlRestart(server=DRAFTED, keep_server=True, force=True)) is None
    )


def test_a_stop_typed_after_the_swap_began_ends_it_and_one_typed_before_does_not(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    intent.change(paths, server={"wanted": False, "why": "stopped"})
    sw = StageSwitch(stage="draft", begun_at=time.time() + 1)  # began after that stop
    stage_switch.check_cancelled(paths, sw)
    sw.begun_at = 0.0
    with pytest.raises(HostFault, match="the draft stage was not started: the server was stopped"):
        stage_switch.check_cancelled(paths, sw)
    intent.change(paths, server={"wanted": True}, runner={"wanted": False, "why": "restarting"})
    assert stage_switch.cancelled(paths, sw) is None  # a restart's own stop is no stop typed


def test_the_swap_before_is_kept_for_the_laptop_that_still_follows_it(tmp_path, monkeypatch):
    """The watcher's baseline swap may begin before the laptop that asked for the draft's has read
    its end: found by its token in the new record's `before`."""
    paths = Paths(tmp_path)
    paths.ensure()

    class Taken:  # the detached process, as far as begin sees it: it records its pid
        pid = 4242

        def poll(self):
            return None

    def start_detached(argv, **kw):
        rec = StageSwitch.read(paths.switch)
        rec.pid = Taken.pid
        rec.write(paths.switch)
        return Taken()

    monkeypatch.setattr(stage_switch.procinfo, "start_detached", start_detached)
    first = stage_switch.begin(paths, StageSwitch(stage="draft"), by="user", rel=tmp_path)
    # its process killed while the model loads: taken up at that step (the runner it stopped, the
    # server it started are not stopped again)
    stage_switch.move(paths, first, SwitchStep.LOADING)
    taken = stage_switch.begin(paths, first, by="user", rel=tmp_path)
    assert (taken.step, taken.tries, taken.token) == (SwitchStep.LOADING, 2, first.token)
    stage_switch.end(paths, first, answer=None)
    second = stage_switch.begin(paths, StageSwitch(stage="baseline"), by="watcher", rel=tmp_path)
    assert second.token != first.token and second.tries == 1
    view = second.view()
    assert view.find(second.token) is view
    found = view.find(first.token)
    assert (found.stage, found.step, found.before) == ("draft", SwitchStep.DONE, None)
    assert view.find("no-such-token") is None


def test_a_swap_given_up_from_inside_the_watchers_lock_does_not_wait_for_it(tmp_path, monkeypatch):
    """A server that died loading is no longer wanted (not started again in a loop); the watcher
    holds the intent's lock when it gives up: that same lock is not taken twice."""
    paths = Paths(tmp_path)
    paths.ensure()
    monkeypatch.setattr(server_process, "managed", lambda paths: None)
    intent.change(paths, server={"wanted": True})
    sw = StageSwitch(stage="baseline", by="user", step=SwitchStep.LOADING)
    with intent.locked(paths):
        stage_switch.given_up(paths, sw, Fault("start_failed", "died"), held=True)
    assert intent.read(paths).server.wanted is False
    stopped = dataclasses.replace(sw, step=SwitchStep.STOPPING_SERVER)
    intent.change(paths, server={"wanted": True})
    stage_switch.given_up(paths, stopped, Fault("start_failed", "died"))
    assert intent.read(paths).server.wanted is True  # not loading: the watcher keeps it


class Loading:
    """server_process.check from a script of looks; each look of a server alive and loading
    waits its wait_s on the injected clock, as the host's does."""

    def __init__(self, looks):
        self.looks, self.now = list(looks), 1000.0

    def check(self, paths, req):
        look = self.looks.pop(0)
        if look.alive and not look.ready:
            self.now += req.wait_s
        return look

    def sleep(self, s):
        self.now += s


def test_the_load_is_waited_for_until_the_server_answers_or_a_headless_one_settles(
    tmp_path, monkeypatch
):
    from remote.common.answers import ServerChecked

    paths = Paths(tmp_path)
    paths.ensure()
    loading = ServerChecked(alive=True, log=["Loading weights"])
    host = Loading([loading] * 3 + [ServerChecked(alive=True, ready=True)])
    monkeypatch.setattr(server_process, "check", host.check)
    sw = StageSwitch(stage="generate", model="tiny", ready_timeout=1800, begun_at=time.time())
    assert stage_switch.wait_ready(paths, sw, 1000.0, lambda: host.now, host.sleep) is False
    assert host.now == 1000.0 + 3 * stage_switch.LOOK_S and host.looks == []
    assert StageSwitch.read(paths.switch).log_line == "Loading weights"  # what each view shows
    # a headless worker serves nothing: alive a while is ready, looked at once a LOOK_S meanwhile
    early = ServerChecked(alive=True, ready=True, headless=True, elapsed_s=1.0)
    settled = ServerChecked(alive=True, ready=True, headless=True, elapsed_s=5.0)
    host = Loading([early, early, settled])
    monkeypatch.setattr(server_process, "check", host.check)
    assert stage_switch.wait_ready(paths, sw, 1000.0, lambda: host.now, host.sleep) is True
    assert host.now == 1000.0 + 2 * stage_switch.LOOK_S


def test_a_load_past_ready_timeout_is_given_up_with_the_server_left_running(tmp_path, monkeypatch):
    from remote.common.answers import ServerChecked

    paths = Paths(tmp_path)
    paths.ensure()
    loading = ServerChecked(alive=True, log=["Loading weights"])
    host = Loading([loading] * 100)
    monkeypatch.setattr(server_process, "check", host.check)
    sw = StageSwitch(stage="generate", model="tiny", ready_timeout=40, begun_at=time.time())
    with pytest.raises(HostFault) as e:
        stage_switch.wait_ready(paths, sw, 1000.0, lambda: host.now, host.sleep)
    fault = e.value.fault
    assert fault.message.startswith("the server is not ready after 40s (server.ready_timeout)")
    assert "`invoke server.stop` to give up" in fault.fix and fault.log == ["Loading weights"]
    assert host.now == 1000.0 + 41 * stage_switch.LOOK_S


def test_a_death_during_start_up_is_said_by_this_starts_own_lines(tmp_path, monkeypatch):
    from remote.common.answers import ServerChecked

    paths = Paths(tmp_path)
    paths.ensure()
    log = ["==== 10:00 starting: vllm serve a", "ValueError: an earlier start's error"]
    log += ["==== 10:05 starting: vllm serve b", "ERROR [core.py] ValueError: vocab size differs"]
    paths.server_log.write_text("\n".join(log) + "\n")
    loading = ServerChecked(alive=True)
    host = Loading([loading, loading, ServerChecked(alive=False)])
    monkeypatch.setattr(server_process, "check", host.check)
    sw = StageSwitch(stage="draft", model="tiny", ready_timeout=1800, begun_at=time.time())
    with pytest.raises(HostFault) as e:
        stage_switch.wait_ready(paths, sw, 1000.0, lambda: host.now, host.sleep)
    assert e.value.fault.message == (
        "the server died during start-up after 2s: ERROR [core.py] ValueError: vocab size "
        "differs (logs/server.log)"
    )
    assert e.value.fault.log == log[-1:]


def test_a_command_typed_while_a_swap_runs_is_refused_and_one_whose_process_is_gone_is_ended(
    tmp_path,
):
    """One swap at a time: busy while its process runs or is starting; one whose process is gone
    is ended by the command typed since (the watcher would otherwise take it up over it)."""
    import os

    from remote.common import procinfo

    paths = Paths(tmp_path)
    paths.ensure()
    me = os.getpid()
    sw = StageSwitch(stage="draft", token="t1", step=SwitchStep.LOADING, step_at=time.time())
    sw.pid, sw.start_time = me, procinfo.start_time(me)  # this process stands in: alive
    sw.write(paths.switch)
    with pytest.raises(HostFault, match="being started again for the draft stage"):
        stage_switch.refuse_during(paths, "restart")
    sw.pid, sw.start_time = 0, None  # begun, its process not yet holding it
    sw.write(paths.switch)
    with pytest.raises(HostFault, match="pid starting"):
        stage_switch.refuse_during(paths, "start")
    sw.pid, sw.start_time = 2**22 + 12345, 1  # its process gone
    sw.write(paths.switch)
    stage_switch.refuse_during(paths, "restart", dry_run=True)  # a dry run changes nothing
    assert stage_switch.current(paths) is not None
    stage_switch.refuse_during(paths, "server.start")
    ended = StageSwitch.read(paths.switch)
    assert ended.step == SwitchStep.FAILED and ended.code == "replaced"
    assert "`server.start` typed since" in ended.error and stage_switch.current(paths) is None


def test_a_swap_whose_process_never_starts_is_ended_not_left_to_be_taken_up(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    paths.ensure()
    killed = []

    class Slow:  # a process that never records itself
        pid = 4243

        def poll(self):
            return None

        def kill(self):
            killed.append(self.pid)

    monkeypatch.setattr(stage_switch.procinfo, "start_detached", lambda argv, **kw: Slow())
    monkeypatch.setattr(stage_switch, "SWITCH_TAKE_S", 0.05)
    with pytest.raises(HostFault, match="did not start"):
        stage_switch.begin(paths, StageSwitch(stage="draft"), by="user", rel=tmp_path)
    assert killed == [4243] and stage_switch.current(paths) is None
    assert StageSwitch.read(paths.switch).step == SwitchStep.FAILED


def test_the_train_stage_stops_the_server_up_or_wanted_and_refuses_first_what_it_cannot_train(
    tmp_path, monkeypatch
):
    from remote.common.jobspec import DatasetSpec, JobSpec

    paths = Paths(tmp_path)
    paths.ensure()
    job = JobSpec((DatasetSpec("B1", "b1.jsonl"),), train={"epochs": 1})
    monkeypatch.setattr(stage_switch, "deployed_spec", lambda: job)
    _serving(monkeypatch, ServerState(up=True, ready=True))
    with pytest.raises(HostFault, match="no hidden-states rows|there are none for B1"):
        stage_switch.needed(paths, CtlRestart(stage="train", server=DRAFTED))
    (paths.hidden_states / "B1").mkdir(parents=True)
    (paths.hidden_states / "B1" / "rows.jsonl").write_text("")
    sw = stage_switch.needed(paths, CtlRestart(stage="train", server=DRAFTED, keep_server=True))
    assert sw.why == "holds the GPUs the train stage needs"  # --no-server or not: it holds them
    # down, and wanted: the watcher would start it beside the trainer, so it is kept down
    _serving(monkeypatch, ServerState(up=False))
    intent.change(paths, server={"wanted": True, "spec": DRAFTED, "base": DRAFTED})
    sw = stage_switch.needed(paths, CtlRestart(stage="train", server=DRAFTED))
    assert sw is not None and sw.why is None
    intent.change(paths, server={"wanted": False, "why": "stopped"})
    assert stage_switch.needed(paths, CtlRestart(stage="train", server=DRAFTED)) is None
    monkeypatch.setattr(stage_switch, "deployed_spec", lambda: JobSpec(job.datasets))
    with pytest.raises(HostFault, match="the deployed job has none: add job.train"):
        stage_switch.needed(paths, CtlRestart(stage="train", server=DRAFTED))
