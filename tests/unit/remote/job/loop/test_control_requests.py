"""The stop and drain state, held once, and the housekeeping clocks."""

from __future__ import annotations

from remote.job.loop.control_requests import Every, StopState


def test_stop_and_drain():
    s = StopState()
    assert not s.asked
    s.drain()
    assert s.asked and s.draining and s.verdict() == "drained"
    assert s.stop("SIGTERM") is False
    assert s.verdict() == "stopped by SIGTERM, not by deploytool (someone's kill, a shutdown)"
    assert s.stop("SIGINT") is True  # a second signal: stop now
    s.by_deploytool = True  # deploytool's stop wrote its grace first
    assert s.verdict() == "stopped as asked (a stop or a restart)"


def test_a_stop_of_deploytools_is_its_verdict_only_when_it_came_before_any_signal():
    ours = StopState()
    ours.tell()  # deploytool's stop writes its grace, then signals
    ours.stop("SIGTERM")
    assert ours.verdict() == "stopped as asked (a stop or a restart)" and ours.foreign is None
    theirs = StopState()
    theirs.stop("SIGTERM")  # someone's kill, a preemption: then `invoke stop` while it stops
    theirs.tell()
    theirs.stop("SIGTERM")
    assert theirs.foreign == "SIGTERM"
    assert theirs.verdict() == (
        "stopped by SIGTERM, not by deploytool (someone's kill, a shutdown)"
    )


def test_a_clock_is_due_at_once_then_once_per_period_and_never_catches_up():
    t = [100.0]
    e = Every(1.0, clock=lambda: t[0])
    assert e.due() and not e.due()
    t[0] = 100.9
    assert not e.due()
    t[0] = 105.0  # a stalled loop: due once, not five times
    assert e.due() and not e.due()
