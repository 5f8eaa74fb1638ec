"""The runner's alerts: each condition notified once while it lasts, cleared when it ends (engine_up
said only after an engine_down), a short server restart not worth a message."""

from __future__ import annotations

from remote.common.status import JobState
from remote.job.engine.pool import Pool
from remote.job.observe.alerts import AlertWatcher
from remote.job.observe.status_builder import stalled


class Notifier:
    def __init__(self):
        self.sent: list[tuple[str, str]] = []

    def send(self, event: str, text: str) -> None:
        self.sent.append((event, text))


def watcher(down_deadline=600.0):
    n, log = Notifier(), []
    w = AlertWatcher(n, log.append, down_deadline=down_deadline, message=str.upper)
    pool = Pool(["http://a", "http://b"], 2, 1.0, lambda _: None)
    return w, n, log, pool


def test_stalled_once_while_it_lasts_and_again_after_it_cleared():
    w, n, log, _ = watcher()

    def check(now, in_flight):
        out = stalled(JobState.RUNNING, in_flight, 0.0, now, 300.0)
        w.check_stall(out, f"no answer finished for {now:.0f}s")

    check(299.0, 3)
    assert n.sent == []  # not yet: it may stay silent 300 s
    check(400.0, 3)
    assert n.sent[0][0] == "stalled" and n.sent[0][1].startswith("STALLED: NO ANSWER FINISHED")
    check(500.0, 3)  # still: not said again
    check(600.0, 0)  # nothing out: no longer stalled
    check(999.0, 3)
    assert [e for e, _ in n.sent] == ["stalled", "stalled"] and "stalled" in log[0]


def test_engine_down_only_after_a_while_then_engine_up():
    w, n, _, pool = watcher(down_deadline=600.0)
    for e in pool.endpoints:
        pool.mark_down(e, "refused", now=1000.0)
    w.check_engine(1030.0, pool, "refused")  # 30 s: a restart, not worth a message
    assert n.sent == []
    w.check_engine(1061.0, pool, "refused")
    assert n.sent[-1][0] == "engine_down" and "FAILS AFTER 600S" in n.sent[-1][1]
    pool.mark_up(pool.endpoints[0], now=1100.0)
    w.check_engine(1100.0, pool, None)
    w.check_engine(1101.0, pool, None)
    assert [e for e, _ in n.sent] == ["engine_down", "engine_up"]


def test_a_server_that_gets_requests_stuck_while_others_answer_is_degraded():
    w, n, log, pool = watcher()
    a = pool.endpoints[0]
    for i in range(10):
        pool.answered(a, 10, now=100.0 + i)
        pool.stuck(a, now=100.0 + i)
    w.check_engine(120.0, pool, None)
    degraded = [t for e, t in n.sent if e == "engine_degraded"]
    assert a.degraded(120.0) and not pool.endpoints[1].degraded(120.0)
    assert len(degraded) == 1 and "HTTP://A (10 STUCK)" in degraded[0] and "degraded" in log[-1]
    w.check_engine(121.0, pool, None)
    assert len([e for e, _ in n.sent if e == "engine_degraded"]) == 1  # said once
