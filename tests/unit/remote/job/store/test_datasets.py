"""One dataset's run: opened over what its outputs hold (torn tails repaired, settings checked), its
target and token budget, which prompt comes next, and the state it reports."""

from __future__ import annotations

import json

import pytest

from remote.common.jobspec import DatasetSpec, Paths
from remote.common.status import DatasetState
from remote.job.store.datasets import BadInput, error_ids, open_dataset
from remote.job.store.outputs import encode_record
from tests.conftest import write_prompts

FP = {"model": "m", "sampling": {"temperature": 1.0}, "extra_body": {}}


def opened(tmp_path, n=6, done=(), fp=FP, force=False, log=None):
    paths = Paths(tmp_path / "root")
    write_prompts(paths.root / "data" / "B1.jsonl", n, "B1")
    paths.outputs.mkdir(parents=True, exist_ok=True)
    with open(paths.output("B1"), "ab") as f:
        for i in done:
            rec = {"id": f"B1-{i:06d}", "dataset": "B1", "index": i, "finish_reason": "stop"}
            f.write(encode_record(dict(rec, usage={"completion_tokens": 10})))
    logged = [] if log is None else log
    run = open_dataset(paths, DatasetSpec("B1", "data/B1.jsonl"), fp, force, logged.append)
    return paths, run, logged


def test_resuming_skips_what_is_recorded_and_counts_its_tokens(tmp_path):
    _, run, _ = opened(tmp_path, done=(0, 2))
    run.set_target(4, budget=None)
    assert (run.done_in_target, run.completion_tokens) == (2, 20)
    got = []
    while (p := run.next_prompt(now=0.0)) is not None:
        run.ledger.send(p.id)
        got.append(p.id)
    assert got == ["B1-000001", "B1-000003"]  # the target's prompts not yet recorded, in order
    assert run.state() == DatasetState.RUNNING and not run.has_work()


def test_records_beyond_a_lowered_cap_stay_out_of_every_count_and_the_budget(tmp_path):
    """The dataset's records are its target's: those made before the cap was lowered are kept and
    counted apart (status: records - done), never in the tokens, the cuts or the budget."""
    _, run, _ = opened(tmp_path, done=(0, 1, 2, 3))
    run.set_target(2, budget=30)
    assert (run.done_in_target, len(run.done), run.completion_tokens) == (2, 4, 20)
    assert not run.budget_reached() and run.mean_tokens == 10
    run.set_target(None, budget=30)  # raised again: they count
    assert (run.done_in_target, run.completion_tokens, run.budget_reached()) == (4, 40, True)
    run.set_target(5, budget=None)
    p = run.next_prompt(0.0)
    run.ledger.send(p.id)
    run.ledger.answered(p.id)
    run.record_done(p, 7, cut=True)
    assert (run.completion_tokens, run.finish_length) == (47, 1)
    run.set_target(2, budget=None)
    assert (run.completion_tokens, run.finish_length) == (20, 0)


def test_a_budget_reached_sends_nothing_more_and_completes_once_nothing_is_in_flight(tmp_path):
    _, run, _ = opened(tmp_path, done=(0,))
    run.set_target(None, budget=10)
    assert run.target_n == 6 and run.budget_reached()
    assert (
        run.next_prompt(0.0) is None and not run.has_work() and run.state() == DatasetState.COMPLETE
    )


def test_pending_then_complete_or_incomplete(tmp_path):
    _, run, _ = opened(tmp_path, n=2)
    run.set_target(2, None)
    assert run.state() == DatasetState.PENDING
    a, b = run.next_prompt(0.0), run.next_prompt(0.0)
    run.ledger.send(a.id)
    run.ledger.answered(a.id)
    run.record_done(a, tokens=5)
    run.ledger.send(b.id)
    run.ledger.fail(b.id)
    assert run.state() == DatasetState.INCOMPLETE  # every prompt tried, one failed for good
    run.set_target(1, None)  # a re-cap under what is done
    assert run.state() == DatasetState.COMPLETE


def test_records_made_with_other_settings_are_refused_unless_forced(tmp_path):
    opened(tmp_path, done=(0,))
    other = dict(FP, model="other")
    with pytest.raises(BadInput, match="B1: its records were made with different model"):
        opened(tmp_path, fp=other)
    _, _, logged = opened(tmp_path, fp=other, force=True)
    assert any("--force: resuming with changed model" in line for line in logged)


def test_a_force_is_given_once_and_stands_until_the_settings_go_back(tmp_path):
    """After a --force with nothing to make, every later start refused again; and a --force taken
    must not let a later change back to those settings through once the records' own came back."""
    opened(tmp_path, done=(0,))
    other = dict(FP, model="other")
    paths, _, _ = opened(tmp_path, fp=other, force=True)
    meta = json.loads(paths.meta("B1").read_text())
    assert meta["model"] == FP["model"] and meta["accepted"]["model"] == "other"
    _, _, logged = opened(tmp_path, fp=other)  # no flag: the settings it took stand
    assert any("resuming with the changed model an earlier --force took" in x for x in logged)
    opened(tmp_path)  # the records' own settings again: what was taken is dropped
    assert "accepted" not in json.loads(paths.meta("B1").read_text())
    with pytest.raises(BadInput, match="B1: its records were made with different model"):
        opened(tmp_path, fp=other)
    # the first record with them: where it begins is kept before it is appended, so a kill
    # between the two leaves the next record made with them there all the same
    paths, run, _ = opened(tmp_path, fp=other, force=True)
    run.first_record()
    meta = json.loads(paths.meta("B1").read_text())
    assert meta["model"] == "other" and meta["since"] == paths.output("B1").stat().st_size > 0
    assert "accepted" not in meta and meta["previous"][0]["model"] == FP["model"]


def test_a_prompts_file_that_is_missing_is_bad_input_that_names_the_fix(tmp_path):
    paths = Paths(tmp_path)
    with pytest.raises(BadInput, match="prompts file .* not found .*job.datasets.B1.prompts"):
        open_dataset(paths, DatasetSpec("B1", "data/none.jsonl"), FP, False, print)


def test_error_ids_skip_unreadable_lines(tmp_path):
    path = tmp_path / "B1.errors.jsonl"
    path.write_text('{"id": "B1-000001", "error": "x"}\nnot json\n{"no": "id"}\n')
    assert error_ids(path) == {"B1-000001"} and error_ids(tmp_path / "none") == set()
