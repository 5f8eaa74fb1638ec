"""tail's reading of the watcher: a recovery carried on, and one nobody carries on dropped."""

from __future__ import annotations

import json

from remote.common.recover import (
    WatchState,
)
from remote.common.status import ProcessWatch


def test_tail_reads_the_watcher_and_drops_a_recovery_nobody_carries_on():
    from deploytool.config import HostConfig
    from deploytool.ops.follow import HostWatch
    from remote.common.recover import WATCH_STALE_S
    from remote.common.status import JobStatus

    files = {}

    class Conn:
        remote_dir = "/r"

        def read_file(self, path):
            return files.get(path)

    ws = WatchState(
        pid=3,
        updated_at=500.0,
        server=ProcessWatch(state="backoff", attempt=1, of=5, next_try_at=512.0),
    )
    files["/r/run/watch.json"] = json.dumps(ws.to_dict())
    w = HostWatch(host=HostConfig(name="gpu1"), config=None, conn=Conn())
    w.status = JobStatus(state="running")
    w._watcher(w.conn, now=1000.0)
    sup = w.status.supervision
    assert sup.supervised and sup.server.recovering and sup.server.next_try_in_s == 12.0
    w._watcher(w.conn, now=1000.0 + WATCH_STALE_S + 1)  # the file has not changed since: stale
    assert not w.status.supervision.supervised and not w.status.supervision.server.recovering


def test_tail_waits_past_a_finished_draft_whose_baseline_the_watcher_starts():
    from deploytool.ops.follow import exit_code
    from remote.common.caps import Caps
    from remote.common.status import JobStatus, Supervision

    def draft(state="finished", baseline=True, supervised=True, ticked=5.0, nxt=None):
        caps = Caps(stage="draft", baseline=baseline).to_dict()
        sup = Supervision(supervised=supervised, ticked_at=ticked, next_stage=nxt)
        return JobStatus(state=state, caps=caps, updated_at=10.0, supervision=sup)

    assert exit_code([draft()]) is None  # the watcher has not looked since the verdict
    assert exit_code([draft(ticked=11.0, nxt="baseline")]) is None  # it is starting it
    # it looked after the verdict and starts nothing (an older watcher, a stop typed meanwhile)
    assert exit_code([draft(ticked=11.0)]) == 0
    assert exit_code([draft(baseline=False)]) == 0
    assert exit_code([draft(supervised=False)]) == 0  # no watcher to start it: the end, said
    assert exit_code([draft(ticked=None)]) == 0  # a watcher of an older release starts none
    assert exit_code([draft(state="failed")]) == 1
    assert exit_code([draft(state="stopped")]) == 1


def test_a_failed_read_of_the_watcher_keeps_what_tail_last_saw_of_it():
    from deploytool.config import HostConfig
    from deploytool.ops.follow import HostWatch
    from remote.common.caps import Caps
    from remote.common.status import JobStatus

    files = {}

    class Conn:
        remote_dir = "/r"

        def read_file(self, path):
            return files.get(path)

    caps = Caps(stage="draft", baseline=True).to_dict()
    files["/r/run/status.json"] = json.dumps(
        JobStatus(state="finished", caps=caps, updated_at=990.0).to_dict()
    )
    ws = WatchState(pid=3, updated_at=999.0, ticked_at=999.0, next_stage="baseline")
    files["/r/run/watch.json"] = json.dumps(ws.to_dict())
    w = HostWatch(host=HostConfig(name="gpu1"), config=None, conn=Conn())
    w.poll_status(1000.0)
    assert w.status.supervision.next_stage == "baseline" and not w.status.over
    files["/r/run/watch.json"] = '{"pid": 3, "upd'  # caught mid-write
    w.poll_status(1000.5)
    assert w.status.supervision.next_stage == "baseline" and not w.status.over
