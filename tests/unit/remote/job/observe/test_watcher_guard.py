"""The runner's guard over the watcher: nothing to do while nothing is wanted, or while a watcher
lives (its pid file) or is starting (its lock held); otherwise one start, counted and told."""

from __future__ import annotations

import fcntl
import os

from remote.common import procinfo
from remote.common.jobspec import Paths
from remote.common.recover import RecoverSpec
from remote.common.state import Supervise, WatcherRecord
from remote.job.observe import watcher_guard
from remote.job.observe.watcher_guard import CHECK_EVERY_S, WatcherGuard


def guard(tmp_path, monkeypatch, wanted=True, recover=True, beaten=False):
    paths = Paths(tmp_path)
    paths.ensure()
    want = Supervise(recover=RecoverSpec(enabled=recover))
    want.runner.wanted = wanted
    want.write(paths.supervise)
    started, logged, notified = [], [], []

    class Proc:
        pid = 4242

    monkeypatch.setattr(
        watcher_guard,
        "start_watcher",
        lambda p, python, release: started.append(p) or (None if beaten else Proc()),
    )
    g = WatcherGuard(paths, logged.append, lambda event, what: notified.append((event, what)))
    return g, paths, started, logged, notified


def test_a_dead_watcher_is_started_once_and_told(tmp_path, monkeypatch):
    g, paths, started, logged, notified = guard(tmp_path, monkeypatch)
    gone = exited_pid()
    WatcherRecord(pid=gone, start_time=1.0).write(paths.watcher_pid)  # killed: its record stays
    assert g.check(100.0) and len(started) == 1 and g.restarts == 1
    assert notified == [("watcher_restarted", logged[0])] and "pid 4242" in logged[0]
    # in run/recover.jsonl, which `report` lists: it said the runner's deaths only
    from remote.common.answers import RecoverEvent
    from remote.common.codec import typed_lines

    (event,) = typed_lines(paths.recover_log, RecoverEvent)
    assert (event.what, event.event) == ("watcher", "restarted")
    assert not g.check(100.5)  # looked at every CHECK_EVERY_S, not every tick
    assert g.check(100.0 + CHECK_EVERY_S) and g.restarts == 2  # still gone: started again


def exited_pid() -> int:
    import subprocess

    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_a_watcher_that_ended_by_itself_is_started_again_and_not_told_as_a_death(
    tmp_path, monkeypatch
):
    """It exited with nothing to watch (taking its pid file) a moment before a restart wanted it
    again: status said `watcher started again 1x by the runner (it was gone)`, a death."""
    g, paths, started, logged, notified = guard(tmp_path, monkeypatch)
    assert g.check(100.0) and len(started) == 1
    assert g.restarts == 0 and notified == [] and "had ended (nothing to watch then)" in logged[0]


def test_nothing_wanted_or_recovery_off_starts_nothing(tmp_path, monkeypatch):
    g, _, started, _, _ = guard(tmp_path, monkeypatch, wanted=False)
    assert not g.check(0.0) and started == []
    g, _, started, _, _ = guard(tmp_path / "off", monkeypatch, recover=False)
    assert not g.check(0.0) and started == []


def test_a_live_or_starting_watcher_is_left_alone(tmp_path, monkeypatch):
    g, paths, started, _, _ = guard(tmp_path, monkeypatch)
    me = os.getpid()
    WatcherRecord(pid=me, start_time=procinfo.start_time(me)).write(paths.watcher_pid)
    assert not g.check(0.0)
    paths.watcher_pid.unlink()
    fd = os.open(paths.watcher_lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a watcher that holds its lock, its record not yet written
    try:
        assert not g.check(10.0) and started == []
    finally:
        os.close(fd)
    assert g.check(20.0) and len(started) == 1


def test_a_watcher_started_by_another_between_the_look_and_the_start_is_not_a_restart(
    tmp_path, monkeypatch
):
    g, _, started, logged, notified = guard(tmp_path, monkeypatch, beaten=True)
    assert not g.check(0.0) and len(started) == 1  # the lock was taken: nothing started
    assert g.restarts == 0 and logged == notified == []
