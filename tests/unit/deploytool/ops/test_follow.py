"""When tail's watch is over: a finished stage that the watcher is to follow with another is not."""

from __future__ import annotations


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


def test_a_host_that_hangs_holds_up_neither_the_others_nor_the_view():
    """Each look runs in a thread of its own: while one host's look hangs, the others are looked at
    each tick; past the deadline the view says how long it has waited, and the hung look's
    connection is closed, which ends it as a lost connection (then a reconnect)."""
    import threading

    from deploytool.config import HostConfig
    from deploytool.errors import ConnectError
    from deploytool.ops.follow import LOOK_DEADLINE_S, HostWatch, look
    from remote.common.status import JobStatus

    class Conn:
        def __init__(self):
            self.closed = threading.Event()

        def close(self):
            self.closed.set()

    class Watch(HostWatch):
        hangs = False
        polls = 0

        def poll_status(self, now):
            self.polls += 1
            if self.hangs:  # a read that only a closed connection ends
                self.conn.closed.wait()
                self._failed(ConnectError("the connection closed"), now)
                return
            self.status = JobStatus(state="running", updated_at=now)

    ok, stuck = Watch(HostConfig(name="ok"), None), Watch(HostConfig(name="stuck"), None)
    stuck.hangs, stuck.conn, ok.conn = True, Conn(), Conn()
    t = [0.0]
    for now in (0.0, 1.0, 2.0):
        t[0] = now
        look([ok, stuck], lambda: t[0], wait_s=0.01)
        assert ok.status.updated_at == now and ok.note is None  # the others go on
    assert stuck.polls == 1 and stuck.status is None and stuck.note is None
    assert not stuck.conn.closed.is_set()

    t[0] = LOOK_DEADLINE_S + 5
    hung = stuck.look
    look([ok, stuck], lambda: t[0], wait_s=0.01)
    assert ok.status.updated_at == t[0]
    assert (
        stuck.note == f"no answer for {LOOK_DEADLINE_S + 5:.0f}s: the host or the connection hangs"
    )
    assert stuck.conn.closed.is_set() and not ok.conn.closed.is_set()
    hung.result()  # the closed connection ended the look
    look([ok, stuck], lambda: t[0], wait_s=0.01)
    assert stuck.look is None and stuck.polls == 1
    assert stuck.note.startswith("connection lost (the connection closed); reconnecting in")
