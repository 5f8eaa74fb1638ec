"""What a user types for caps, parsed on either side: token counts with their suffixes, DS=N, the
`all` that clears a cap, dataset lists, stages; the kept caps' one log line and what a restart
changed about a dataset's row."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remote.common import caps as c
from remote.common.stages import HIDDEN_STATES


@given(st.integers(min_value=0, max_value=10**12))
def test_a_token_count_reads_back_whatever_suffix_says_it(n):
    assert c.parse_tokens(str(n)) == n == c.parse_tokens(n)
    assert c.parse_tokens(f"{n}k") == n * 1000 and c.parse_tokens(f" {n} M ") == n * 10**6


def test_token_counts_refuse_what_is_no_whole_count():
    assert c.parse_tokens("2.5M") == 2_500_000 and c.parse_tokens("1b") == 10**9
    for bad, error in (("1.0005k", "not a whole number"), ("ten", "like 10M"), (True, "like 10M"),
                      (-1, "non-negative"), ("5T", "like 10M")):  # fmt: skip
        with pytest.raises(ValueError, match=error):
            c.parse_tokens(bad)


def test_a_cap_is_ds_eq_n_and_all_clears_it():
    assert c.parse_cap("B2 = 2636") == ("B2", 2636)
    assert c.cap_change("B2=all") == ("B2", c.CLEAR) and c.cap_change("B3=7") == ("B3", 7)
    for bad, error in (("B2", "DS=N"), ("B2=x", "whole number"), ("B/2=3", "must match"),
                       ("=3", "the dataset first \\(`--cap B2=3`\\)"),
                      ("B2=0", "N must be >= 1 .*--datasets"), ("B2=-4", "N must be >= 1")):  # fmt: skip
        with pytest.raises(ValueError, match=error):
            c.cap_change(bad)


def test_samples_budgets_selections_and_stages():
    assert c.samples("7000") == 7000 and c.samples(" ALL ") == c.CLEAR
    for n in ("0", "-1"):  # one message for every number below 1
        with pytest.raises(ValueError) as e:
            c.samples(n)
        assert str(e.value) == (
            f"expected a number >= 1 or `all`, got {n} (to leave datasets out: --datasets)"
        )
    with pytest.raises(ValueError, match="expected a whole number"):
        c.samples("7k")
    assert c.token_budget("none") == c.CLEAR and c.token_budget("10M") == 10**7
    for zero in ("0", "0k", 0):  # a budget spent before it starts would stop every dataset at once
        with pytest.raises(ValueError, match="expected a token count >= 1 .* or `none`"):
            c.token_budget(zero)
    assert c.selection("B2, B3") == ("B2", "B3") and c.selection("all") == c.CLEAR
    for bad in (",", "B1,,B2", "B1,", " "):  # an empty name is a name lost in typing
        with pytest.raises(ValueError, match="comma-separated"):
            c.selection(bad)
    assert c.parse_dataset_list("") is None
    assert c.stage(" hidden-states") == HIDDEN_STATES
    with pytest.raises(ValueError, match="expected one of generate, hidden-states"):
        c.stage("hidden")


def test_the_kept_caps_say_themselves_in_one_line_and_name_each_target():
    kept = c.Caps(max_samples=20, caps={"B3": 5}, max_tokens=10_000, datasets=["B1", "B3"])
    assert kept.line() == "max-samples 20, B3=5, max-tokens 10000, datasets B1,B3"
    assert kept.target("B3") == 5 and kept.target("B1") == 20
    assert kept.selected("B1") and not kept.selected("B2")
    every = c.Caps(stage=HIDDEN_STATES)
    assert every.line() == "max-samples all, stage hidden-states" and every.target("B1") is None


def test_a_row_knows_what_the_restart_changed_and_raised():
    assert c.CapRow(cap=6, was=4, prompts=10).raised  # 4 -> 6 of 10: more to run
    assert not c.CapRow(cap=6, was=4, prompts=4).raised  # the file had only 4: nothing more
    assert c.CapRow(cap=None, was=4, prompts=10).raised  # all of them now
    assert not c.CapRow(cap=2, was=4, prompts=10).raised and c.CapRow(cap=2, was=4).changed
    assert c.CapRow(selected=True, was_selected=False).raised
    assert not c.CapRow(cap=None, was=None).changed
    assert c.CapRow(cap=40, prompts=32, target=32).short_of_cap


def test_sizes_are_said_in_one_unit_system_powers_of_1024():
    assert [c.fmt_bytes(n) for n in (999, 57_300, 4.6e12, 2e15)] == [
        "999 B", "56.0 KiB", "4.2 TiB", "1819.0 TiB",
    ]  # fmt: skip


def test_a_cap_list_is_told_how_several_are_given_and_a_separator_is_no_list():
    import pytest

    from remote.common.caps import parse_cap

    with pytest.raises(ValueError, match="one DS=N a flag: --cap B2=3 --cap B3=4"):
        parse_cap("B2=3,B3=4")
    with pytest.raises(ValueError, match="N must be a whole number"):
        parse_cap("B2=3,000")
    # `all` is the dataset's cap cleared: back to --max-samples, not every prompt of its file
    with pytest.raises(ValueError, match="or `all` to take the dataset back to --max-samples$"):
        parse_cap("B2=abc")


def test_eval_samples_below_one_is_refused_without_the_caps_hint():
    import pytest

    from remote.common.caps import held_out, samples

    with pytest.raises(ValueError) as e:
        held_out("0")
    assert str(e.value) == "expected a number >= 1 or `all`, got 0"
    with pytest.raises(ValueError, match="to leave datasets out: --datasets"):
        samples("0")
