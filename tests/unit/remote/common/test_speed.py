"""The job's tokens per second, one rule for every command: a runner's last minute while it runs,
else the job's mean over the time it ran (starred where a view shows it)."""

from __future__ import annotations

from remote.common.speed import rate_said


def test_the_last_minute_only_while_a_runner_runs_and_has_one_else_the_mean():
    assert rate_said("running", 900.0, 800.0) == (900.0, False)
    assert rate_said("running", 0.0, 800.0) == (800.0, True)  # nothing finished in the minute
    assert rate_said("running", 0.0, None) == (None, False)  # nothing made yet: not measured
    for ended in ("finished", "stopped", "failed", "starting"):
        assert rate_said(ended, 900.0, 800.0) == (800.0, True), ended  # the end's minute: no rate
        assert rate_said(ended, 900.0, None) == (None, False), ended
