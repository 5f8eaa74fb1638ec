"""What status says of the supervision, read from supervise.json, the watcher's pid file and
watch.json: unsupervised while something is wanted and no watcher runs, and what a reboot needs."""

from __future__ import annotations

import os
import sys

from remote.common import procinfo
from remote.common.jobspec import Paths, release_dir
from remote.common.recover import RecoverSpec
from remote.common.state import WatcherRecord
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
    assert watch.supervision(paths).note == "a reboot needs `invoke restart`"
    intent.change(paths, recover=RecoverSpec(on_boot=True))
    monkeypatch.setattr(watch.boot, "NO_SYSTEMD", "this host does not run systemd")
    assert watch.supervision(paths).note.endswith("(this host does not run systemd)")


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


def test_the_stage_asked_to_follow_goes_step_by_step_and_a_watcher_started_again_goes_on(tmp_path):
    """The baseline after the draft: its caps kept, the server swapped for hosts.yaml's own spec,
    the runner started only once that server is ready; nothing when it is no longer wanted."""
    import dataclasses
    import time

    from remote.common.caps import Caps
    from remote.common.jobspec import ServerSpec
    from remote.common.state import ServerRecord, kept_caps
    from remote.common.status import ProcessState
    from remote.host.processes.extraction import stage_spec

    paths = Paths(tmp_path)
    paths.ensure()
    plain = ServerSpec(model="m", draft={"model": "d", "method": "eagle3"})
    plain = dataclasses.replace(plain, draft=dict(plain.draft, num_speculative_tokens=3))
    drafting = stage_spec(plain, "draft", paths)
    intent.keep_caps(paths, Caps(max_samples=4, stage="draft", baseline=True))
    intent.change(
        paths,
        runner={"wanted": True},
        server={"wanted": True, "spec": drafting, "base": plain},
    )
    done = []

    def watcher() -> watch.Watcher:
        w = watch.Watcher(paths)
        w.server.swap = lambda now, spec, why: (
            done.append(("swap", spec)) or intent.change(paths, server={"spec": spec})
        )
        w.runner.start_next = lambda now, want: done.append(("runner",))
        w.runner.then = "baseline"
        return w

    w = watcher()
    w._next_stage(time.time())
    assert kept_caps(paths) == Caps(max_samples=4, stage="baseline")
    assert done == [("swap", plain)]  # hosts.yaml's own server: no --speculative-config
    w._next_stage(time.time())
    assert done == [("swap", plain)]  # not ready yet: no runner
    me = os.getpid()
    rec = ServerRecord(pid=me, start_time=procinfo.start_time(me), ready_at=time.time())
    rec.write(paths.server_pid)
    w = watcher()  # the watcher started again: it goes on where the last one was
    w.server.seen.state = ProcessState.WATCHING
    w._next_stage(time.time())
    assert done == [("swap", plain), ("runner",)]
    # the caps changed by a restart typed meanwhile: it wins, and the finished job's status says
    # the baseline will not come (nobody waits for it); nothing started, the runner not wanted
    from remote.common.status import JobStatus

    done.clear()
    JobStatus(state="finished", caps=Caps(stage="draft", baseline=True).to_dict()).write(
        paths.status
    )
    intent.keep_caps(paths, Caps(stage="generate"))
    w = watcher()
    w._next_stage(time.time())
    assert done == [] and w.runner.then is None and not intent.read(paths).runner.wanted
    st = JobStatus.read(paths.status)
    assert "the baseline stage was not started: the caps were changed" in st.message
    assert st.caps["baseline"] is False


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
