"""When tail's watch is over: a finished stage that the watcher is to follow with another is not."""

from __future__ import annotations


def test_tail_waits_past_a_finished_draft_whose_baseline_the_watcher_starts():
    from deploytool.ops.follow import exit_code
    from remote.common.caps import Caps
    from remote.common.status import JobView, Supervision

    def draft(state="finished", baseline=True, supervised=True, ticked=5.0, nxt=None):
        caps = Caps(stage="draft", baseline=baseline).to_dict()
        sup = Supervision(supervised=supervised, ticked_at=ticked, next_stage=nxt)
        return JobView(state=state, caps=caps, updated_at=10.0, supervision=sup)

    assert exit_code([draft()]) is None  # the watcher has not looked since the verdict
    assert exit_code([draft(ticked=11.0, nxt="baseline")]) is None  # it is starting it
    # it looked after the verdict and starts nothing (an older watcher, a stop typed meanwhile)
    assert exit_code([draft(ticked=11.0)]) == 0
    assert exit_code([draft(baseline=False)]) == 0
    assert exit_code([draft(supervised=False)]) == 0  # no watcher to start it: the end, said
    assert exit_code([draft(ticked=None)]) == 0  # a watcher of an older release starts none
    assert exit_code([draft(state="failed")]) == 1
    assert exit_code([draft(state="stopped")]) == 1
