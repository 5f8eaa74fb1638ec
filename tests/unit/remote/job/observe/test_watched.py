"""run/watch.json as the runner reads it: a recovery followed, a restarted server told once, a stale file ignored."""

from __future__ import annotations

from remote.common.codec import write_json
from remote.common.recover import (
    WatchState,
)
from remote.common.status import ProcessWatch
from remote.job.observe.watched import WatchView


def test_watch_view_follows_recovery_and_a_restarted_server(tmp_path):
    path = tmp_path / "watch.json"
    v = WatchView(path, every=0.0)
    assert v.poll(100.0) is False and v.server_recovering is False  # no file: nothing to do
    ws = WatchState(pid=1, updated_at=100.0, server=ProcessWatch(state="backoff"))
    write_json(path, ws.to_dict())
    assert v.poll(101.0) is False and v.server_recovering and v.recovering_at == 101.0
    ws.server, ws.server_ready_seq, ws.updated_at = ProcessWatch(state="watching"), 1, 102.0
    write_json(path, ws.to_dict())
    assert v.poll(103.0) is True and not v.server_recovering
    assert v.recovering_at == 101.0  # the runner's down_deadline counts from here, not the death
    assert v.poll(104.0) is False  # told once
    write_json(path, dict(ws.to_dict(), server={"state": "starting"}, updated_at=0.0))
    assert v.poll(105.0) is False and not v.server_recovering  # a stale file: the watcher is gone


def test_a_server_started_by_hand_on_this_host_is_told_once_it_is_ready(tmp_path):
    """`server.start` is no watcher's: its record's ready_at is what says the server is back."""
    from remote.common.state import ServerRecord

    pid = tmp_path / "server.pid"
    v = WatchView(tmp_path / "watch.json", every=0.0, server_pid=pid)
    ServerRecord(pid=5, ready_at=50.0).write(pid)
    assert v.poll(100.0) is False  # ready before the runner looked: no news
    ServerRecord(pid=6).write(pid)  # started again, loading
    assert v.poll(101.0) is False
    ServerRecord(pid=6, ready_at=102.0).write(pid)
    assert v.poll(103.0) is True and v.poll(104.0) is False  # told once
    pid.unlink()  # stopped: nothing to tell
    assert v.poll(105.0) is False


def test_the_runner_judges_watch_json_by_the_rule_status_does(tmp_path):
    """A watch.json past WATCH_STALE_S is a watcher gone for status; the runner waited 30 s, so
    it went on trusting a recovery that status said nobody carried on."""
    from remote.common.recover import WATCH_STALE_S, watcher_alive

    path = tmp_path / "watch.json"
    v = WatchView(path, every=0.0)
    WatchState(pid=1, updated_at=100.0, server=ProcessWatch(state="backoff")).write(path)
    for age in (1.0, WATCH_STALE_S - 0.5, WATCH_STALE_S + 0.5, 20.0):
        v.poll(100.0 + age)
        assert v.server_recovering is watcher_alive(age), age
    assert not v.server_recovering  # at 20 s: gone, as status says
