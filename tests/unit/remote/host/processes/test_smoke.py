"""The smoke test's verdict on an answer: empty, one token over and over, one character over and
over are broken; an ordinary short answer is not."""

from __future__ import annotations

from remote.host.processes.smoke import degenerate


def test_broken_answers_are_named_and_a_plain_one_passes():
    assert degenerate("   \n") == "empty output"
    assert degenerate("the the the the the the the the").startswith("one token repeated: 'the the")
    assert degenerate("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!").startswith("one character repeated")
    assert degenerate("The capital of France is Paris.") is None
    assert degenerate("yes yes") is None  # too short to call
