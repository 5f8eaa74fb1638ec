"""The "did you mean" of every refusal: the same word but for case first, else the closest one,
quoted for a value, bare for a flag; nothing where none is close."""

from __future__ import annotations

from remote.common.words import suggest


def test_the_word_meant_is_the_same_but_for_case_first_else_the_closest():
    assert suggest("b2", ["B1", "B2"]) == " (did you mean 'B2'?)"
    assert suggest("hidden", ["generate", "hidden-states"]) == " (did you mean 'hidden-states'?)"
    assert suggest("--max-sample", ["--max-samples"], quoted=False) == (
        " (did you mean --max-samples?)"
    )
    assert suggest("zzz", ["generate", "train"]) == ""
