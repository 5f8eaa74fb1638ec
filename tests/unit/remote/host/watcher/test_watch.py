"""What status says of the supervision, read from supervise.json, the watcher's pid file and
watch.json: unsupervised while something is wanted and no watcher runs, and what a reboot needs."""

from __future__ import annotations

import os
import sys

from remote.common import procinfo
from remote.common.jobspec import Paths, release_dir
from remote.common.recover import RecoverSpec
from remote.common.state import SWITCH_TAKE_S, WatcherRecord
from remote.host.facts import intent
from remote.host.watcher import watch


def test_nothing_wanted_is_not_supervised_and_says_nothing(tmp_path):
    sup = watch.supervision(Paths(tmp_path))
    assert not sup.enabled and sup.note is None and watch.managed(Paths(tmp_path)) is None


def test_wanted_without_a_watcher_says_how_to_bring_it_back(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    intent.change(paths, runner={"wanted": True})
    sup = watch.supervision(paths)
    assert sup.enabled and sup.note.startswith("unsupervised: the watcher is not running")
    assert watch.stop(paths) is False  # none to stop


def test_with_a_watcher_a_reboot_still_needs_a_restart_unless_on_boot(tmp_path, monkeypatch):
    paths = Paths(tmp_path)
    paths.ensure()
    intent.change(paths, runner={"wanted": True})
    me = os.getpid()  # stands in for the watcher's process: its record names a live process
    WatcherRecord(pid=me, start_time=procinfo.start_time(me), token="w").write(paths.watcher_pid)
    assert watch.managed(paths).pid == me
    monkeypatch.setattr(watch.boot, "systemd_running", lambda: False)
    assert watch.supervision(paths).note.startswith("a reboot needs `invoke restart`")
    intent.change(paths, recover=RecoverSpec(on_boot=True))
    monkeypatch.setattr(watch.boot, "NO_SYSTEMD", "this host does not run systemd")
    assert watch.supervision(paths).note.endswith("(this host does not run systemd)")


def test_the_reboot_note_names_the_setting_that_would_bring_the_job_back(tmp_path, monkeypatch):
    """It said `a reboot needs invoke restart` on every screen, recover.on_boot unnamed."""
    paths = Paths(tmp_path)
    paths.ensure()
    intent.change(paths, runner={"wanted": True})
    me = os.getpid()  # stands in for the watcher's process: its record names a live process
    WatcherRecord(pid=me, start_time=procinfo.start_time(me), token="w").write(paths.watcher_pid)
    monkeypatch.setattr(watch.boot, "systemd_running", lambda: True)
    assert watch.supervision(paths).note == (
        "a reboot needs `invoke restart`; with recover.on_boot: true in hosts.yaml (then `invoke "
        "restart` once) a systemd unit brings the job back by itself"
    )
    monkeypatch.setattr(watch.boot, "systemd_running", lambda: False)
    assert watch.supervision(paths).note == (
        "a reboot needs `invoke restart` (recover.on_boot, which would bring the job back by "
        "itself, needs systemd, which this host does not run)"
    )
    intent.change(paths, recover=RecoverSpec(on_boot=True))
    monkeypatch.setattr(watch.boot, "systemd_running", lambda: True)  # the unit not in place yet
    assert watch.supervision(paths).note == (
        "a reboot needs `invoke restart` (recover.on_boot is set, but its systemd unit is not in "
        "place yet: `invoke restart` installs it)"
    )


def test_the_watcher_starts_from_its_release_with_nothing_installed(tmp_path):
    """A GPU host's python has no deploytool installed: `-m remote` must be found in the release."""
    python = tmp_path / "python"  # site-packages off: only the release's own folder has `remote`
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    paths = Paths(tmp_path / "root")
    paths.ensure()
    intent.change(paths, runner={"wanted": True})
    try:
        rec = watch.ensure(paths, python=str(python))
        assert rec is not None and rec.alive(), paths.watcher_log.read_text()[-500:]
        assert rec.release == str(release_dir())
    finally:
        assert watch.stop(paths)


def test_a_watcher_slow_to_start_is_waited_for_and_never_doubled(tmp_path):
    """A busy machine stretches a watcher's Python start: the command waits for its record (here the
    start is held until it has begun), and a look meanwhile finds it starting, not gone."""
    import threading
    import time

    from remote.common.state import lock_held, start_watcher

    gate, begun = tmp_path / "go", tmp_path / "begun"
    python = tmp_path / "python"
    python.write_text(  # says it has begun (its starter holds the lock by then), waits for the gate
        f"#!/bin/sh\ntouch {begun}\nwhile [ ! -e {gate} ]; do sleep 0.01; done\n"
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    paths = Paths(tmp_path / "root")
    paths.ensure()
    intent.change(paths, runner={"wanted": True})
    seen = []

    def look_then_open():
        # waits on a file, not on the lock: a look at the lock holds it for an instant, and a look
        # at the moment the command takes it made the command's start find it held (a hang)
        while not begun.exists():
            time.sleep(0.005)
        assert lock_held(paths.watcher_lock)
        seen.append(start_watcher(paths, sys.executable, release_dir()))  # the runner's guard
        gate.touch()

    t = threading.Thread(target=look_then_open)
    t.start()
    try:
        rec = watch.ensure(paths, python=str(python))
        t.join()
        assert seen == [None]  # the lock was held all through the start: no second watcher
        assert rec is not None and rec.alive(), paths.watcher_log.read_text()[-500:]
    finally:
        gate.touch()
        t.join()
        assert watch.stop(paths)


def test_a_long_tick_keeps_watch_json_fresh_until_it_is_too_long_to_be_a_wait(tmp_path):
    """A watcher waiting inside a tick (a smoke test, a runner coming up) rewrites watch.json every
    second, so status and tail, by the one rule (rewritten in the last WATCH_STALE_S), see it at
    work; a tick past LONGEST_TICK_S is a wedge, and the file goes stale."""
    from remote.common.recover import WatchState, watcher_alive

    paths = Paths(tmp_path)
    paths.ensure()
    w = watch.Watcher(paths)
    w.tick_started = 1_000.0
    w.write_state(1_000.0)
    assert not w.beat(1_000.5)  # the loop wrote half a second ago
    assert w.beat(1_030.0) and WatchState.read(paths.watch_state).updated_at == 1_030.0
    assert watcher_alive(1_035.0 - WatchState.read(paths.watch_state).updated_at)
    assert not w.beat(1_000.0 + watch.LONGEST_TICK_S)
    age = 1_000.0 + watch.LONGEST_TICK_S + 20 - WatchState.read(paths.watch_state).updated_at
    assert not watcher_alive(age)
    assert not watcher_alive(None)


def test_a_live_watcher_that_stopped_writing_is_unsupervised_at_once_by_its_file(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    intent.change(paths, runner={"wanted": True})
    me = os.getpid()  # a live process, started long ago, whose watch.json is old: wedged
    WatcherRecord(pid=me, start_time=procinfo.start_time(me), token="w", started_at=1.0).write(
        paths.watcher_pid
    )
    from remote.common.recover import WatchState

    WatchState(pid=me, updated_at=2.0).write(paths.watch_state)
    assert not watch.supervision(paths).supervised
    WatchState(pid=me, updated_at=__import__("time").time()).write(paths.watch_state)
    assert watch.supervision(paths).supervised


def test_a_recovery_is_shown_while_its_watcher_works_and_dropped_once_nobody_carries_it_on(
    tmp_path,
):
    import time

    from remote.common.recover import WatchState
    from remote.common.status import ProcessWatch

    paths = Paths(tmp_path)
    paths.ensure()
    intent.change(paths, server={"wanted": True})
    me = os.getpid()  # stands in for the watcher's process
    WatcherRecord(pid=me, start_time=procinfo.start_time(me), token="w", started_at=1.0).write(
        paths.watcher_pid
    )
    now = time.time()
    backoff = ProcessWatch(state="backoff", attempt=1, of=5, next_try_at=now + 12)
    WatchState(pid=me, updated_at=now, server=backoff).write(paths.watch_state)
    sup = watch.supervision(paths)
    assert sup.supervised and sup.server.recovering and 10 < sup.server.next_try_in_s <= 12
    WatchState(pid=me, updated_at=now - 60, server=backoff).write(paths.watch_state)  # wedged
    sup = watch.supervision(paths)
    assert not sup.supervised and not sup.server.recovering


def _serving_the_draft(paths, monkeypatch):
    """hosts.yaml's server (`plain`) and the draft stage's (`drafting`), the latter up and ready."""
    import dataclasses

    from remote.common.answers import ServerState
    from remote.common.jobspec import ServerSpec, flag_value
    from remote.host.processes import server_process
    from remote.host.processes.extraction import stage_spec

    plain = ServerSpec(model="m", command="true", draft={"model": "d", "method": "eagle3"})
    plain = dataclasses.replace(plain, draft=dict(plain.draft, num_speculative_tokens=3))
    drafting = stage_spec(plain, "draft", paths)
    spec = flag_value(drafting.args, "--speculative-config")
    up = ServerState(up=True, ready=True, speculative=spec)
    monkeypatch.setattr(server_process, "server_state", lambda paths, req=None: up)
    return plain, drafting


def test_the_stage_asked_to_follow_begins_the_hosts_swap_and_nothing_is_kept_while_it_runs(
    tmp_path, monkeypatch
):
    """The baseline after the draft: its caps kept, then the very swap a typed restart of that
    stage makes (hosts.yaml's own server, no --speculative-config), begun by the watcher and
    carried out by the host's own process; while that runs, nothing is kept (the server stopped
    and loading is no death); one whose process is gone is taken up again, then given up."""
    import time

    from remote.common.caps import Caps
    from remote.common.state import StageSwitch, kept_caps
    from remote.common.status import JobStatus, ProcessState, SwitchStep
    from remote.host.processes import stage_switch

    paths = Paths(tmp_path)
    paths.ensure()
    plain, drafting = _serving_the_draft(paths, monkeypatch)
    begun = []

    def begin(paths, sw, by, rel=None):  # recorded, as the real one records it, no process
        sw.by = by
        begun.append((sw, by))
        return sw

    monkeypatch.setattr(stage_switch, "begin", begin)
    intent.keep_caps(paths, Caps(max_samples=4, stage="draft", baseline=True))
    intent.change(
        paths, runner={"wanted": True}, server={"wanted": True, "spec": drafting, "base": plain}
    )
    w = watch.Watcher(paths)
    w.runner.due_stage = "baseline"
    w._next_stage(time.time())
    assert kept_caps(paths) == Caps(max_samples=4, stage="baseline")
    ((sw, by),) = begun
    assert (sw.stage, by, sw.spec, sw.restart_server) == ("baseline", "watcher", plain, True)
    assert sw.why == "runs with the draft stage's draft" and w.runner.due_stage is None
    # the swap under way, its process alive (this one stands in): nothing kept, the next stage said
    me = os.getpid()
    sw.pid, sw.start_time, sw.step = me, procinfo.start_time(me), SwitchStep.LOADING
    sw.write(paths.switch)
    assert w.tick(time.time()) is True
    state = __import__("json").loads(paths.watch_state.read_text())
    assert state["next_stage"] == "baseline" and state["server"]["state"] == "starting"
    assert w.server.swapping and not begun[1:]
    # its process gone: taken up again once, then given up with the step it was at
    sw.pid, sw.start_time, sw.step_at = 0, None, time.time() - SWITCH_TAKE_S - 1
    sw.write(paths.switch)
    w.tick(time.time())
    assert len(begun) == 2
    sw.tries = stage_switch.TRIES
    sw.write(paths.switch)
    JobStatus(state="finished", caps=Caps(stage="draft", baseline=True).to_dict()).write(
        paths.status
    )
    w.tick(time.time())
    ended = StageSwitch.read(paths.switch)
    assert ended.step == SwitchStep.FAILED and "killed 2 times, at: loading" in ended.error
    assert "the baseline stage was not started" in JobStatus.read(paths.status).message
    # the caps changed by a restart typed meanwhile: it wins, and the finished job's status says
    # the baseline will not come (nobody waits for it); nothing begun, the runner not wanted
    begun.clear()
    JobStatus(state="finished", caps=Caps(stage="draft", baseline=True).to_dict()).write(
        paths.status
    )
    assert not intent.read(paths).server.wanted  # died loading: not started again in a loop
    intent.change(paths, runner={"wanted": True}, server={"wanted": True})
    intent.keep_caps(paths, Caps(stage="generate"))
    w = watch.Watcher(paths)
    w.runner.due_stage = "baseline"
    w._next_stage(time.time())
    assert begun == [] and w.runner.due_stage is None and not intent.read(paths).runner.wanted
    st = JobStatus.read(paths.status)
    assert "the baseline stage was not started: the caps were changed" in st.message
    assert st.caps["baseline"] is False
    assert w.server.seen.state != ProcessState.FATAL


def test_a_baseline_whose_swap_process_never_starts_fails_the_job_and_is_told(
    tmp_path, monkeypatch
):
    """begin ended the record and raised: the watcher says so (the status, job.notify), never a
    traceback in its log with the draft's job left `finished` and the caps already moved."""
    import time

    from remote.common.caps import Caps
    from remote.common.status import JobState, JobStatus
    from remote.common.wire import HostFault
    from remote.host.processes import stage_switch

    paths = Paths(tmp_path)
    paths.ensure()
    plain, drafting = _serving_the_draft(paths, monkeypatch)

    def begin(paths, sw, by, rel=None):  # as the real one: recorded as the watcher's, then ended
        sw.by = by
        raise HostFault(
            "start_failed", "the process that starts the server for the stage did not start"
        )

    monkeypatch.setattr(stage_switch, "begin", begin)
    intent.keep_caps(paths, Caps(max_samples=4, stage="draft", baseline=True))
    intent.change(
        paths, runner={"wanted": True}, server={"wanted": True, "spec": drafting, "base": plain}
    )
    JobStatus(state="finished", caps=Caps(stage="draft", baseline=True).to_dict()).write(
        paths.status
    )
    w = watch.Watcher(paths)
    notified = []
    w.tell = lambda event, what: notified.append((event, what))
    w.runner.due_stage = "baseline"
    w._next_stage(time.time())
    st = JobStatus.read(paths.status)
    assert st.state == JobState.FAILED and "did not start" in st.message
    assert notified == [
        (
            "failed",
            "the baseline stage was not started: the process that starts the server for the "
            "stage did not start",
        )
    ]


def test_once_a_swap_ends_its_server_is_watched_anew_and_a_failed_baseline_is_told(tmp_path):
    """The swap's process waited for the server and smoke-tested it: the watcher does neither again
    (no second smoke test while the stage measures, no load counted from the swap's begin); a
    baseline the watcher began that failed is told as a failure, one a stop ended is not."""
    import time

    from remote.common.state import StageSwitch
    from remote.common.status import ProcessState, SwitchStep

    paths = Paths(tmp_path)
    paths.ensure()
    notified = []
    for code in ("start_failed", "cancelled"):
        w = watch.Watcher(paths)
        w.tell = lambda event, what: notified.append((event, what))
        w.server.seen.move(ProcessState.STARTING, why="started for the baseline stage")
        w.server.swapping, w.server.started_at = True, time.time() - 10_000
        sw = StageSwitch(stage="baseline", by="watcher", token=code, step=SwitchStep.FAILED)
        sw.error, sw.code = "the server died during start-up after 3s", code
        sw.write(paths.switch)
        w.tick(time.time())
        assert not w.server.swapping and w.server.started_at is None
        assert w.server.seen.state == ProcessState.IDLE  # no server: nothing of its load kept
        assert len(notified) == 1  # the failure told; the stop's end not
    assert notified == [
        ("failed", "the baseline stage was not started: the server died during start-up after 3s")
    ]


def test_a_runner_given_up_on_and_started_again_by_a_restart_is_watched_anew(tmp_path):
    """The watcher gave up on the runner but goes on watching the server; a restart typed after
    that wants the runner again: this watcher keeps it from then on, with a whole restart budget."""
    from remote.common.status import ProcessState

    paths = Paths(tmp_path)
    paths.ensure()
    intent.change(paths, runner={"wanted": True}, server={"wanted": True})
    w = watch.Watcher(paths)
    w.server.tick = lambda now, want: None  # the server: watched, alive (not this test's)
    why = None
    for _ in range(w.spec.max_restarts + 1):  # a death after each restart, until none is left
        why = w.runner._died(100.0, "died", [])
        w.runner.budget.restarting(100.0)
    w.runner._give_up(why)
    assert w.runner.seen.state == ProcessState.FATAL and not intent.read(paths).runner.wanted
    assert w.tick(200.0)  # the server still watched: the watcher goes on
    intent.change(paths, runner={"wanted": True})  # `invoke restart`
    starts = []
    w.runner._start = lambda now, want, next_stage=False: starts.append(now)
    w.runner._watch = lambda now: w.runner._died(now, "died once more", [])
    w.tick(300.0)
    assert w.runner.seen.state != ProcessState.FATAL and w.runner.seen.restarts == 0
    assert starts == [300.0]  # its first death after the restart: started again at once


def test_watch_json_goes_stale_only_after_several_missed_heartbeats():
    """Two numbers, two meanings: HEARTBEAT_S is how often the watcher rewrites watch.json,
    WATCH_STALE_S how old it may be before everyone calls the watcher gone."""
    from remote.common.recover import WATCH_STALE_S

    assert WATCH_STALE_S >= 5 * watch.HEARTBEAT_S


def test_a_restart_under_way_is_said_while_it_holds_the_job_and_not_once_killed(tmp_path):
    """A restart says the runner is not wanted, `restarting`, and holds the intent's lock from
    the stop to the start: status says restarting then. One killed midway lets go of the lock:
    not said (it would never end)."""
    import subprocess

    paths = Paths(tmp_path)
    paths.ensure()
    intent.change(paths, runner={"wanted": False, "why": intent.RESTARTING})
    assert not watch.supervision(paths).restarting  # said, but nobody holds the job
    lock = paths.run / "supervise.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl,os,sys;fd=os.open(sys.argv[1],os.O_RDWR);"
            "fcntl.flock(fd,fcntl.LOCK_EX);print('held',flush=True);sys.stdin.read()",
            str(lock),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        assert watch.supervision(paths).restarting
        intent_data = intent.read(paths)
        assert intent_data.runner.why == intent.RESTARTING
    finally:
        holder.kill()
        holder.wait()
    assert not watch.supervision(paths).restarting  # killed midway: the lock let go
