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
