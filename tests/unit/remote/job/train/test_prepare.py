"""The training data folder: the datasets' usable rows merged in order, weights repeating them,
renumbered with links to their files, converted as the docs say (here by the stand-in `datasets`),
made whole or not at all, and never changed once made."""

from __future__ import annotations

import json
import os

from remote.job.train import prepare
from tests.helpers import train_data


def made(tmp_path, the_plan):
    run = train_data.run_prepare(tmp_path, the_plan)
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_rows_merge_in_order_skipping_freed_and_missing_files(tmp_path):
    b1 = train_data.write_dataset(tmp_path / "hs", "B1", 5, freed={1}, missing={3})
    b2 = train_data.write_dataset(tmp_path / "hs", "B2", 3)
    out = tmp_path / "train" / "data"
    summary = made(tmp_path, train_data.plan(out, (b1, 1), (b2, 2)))
    # the training rows (B2's twice), then each dataset's last tenth once: the validation rows
    assert summary["rows"] == 2 + 2 * 2 + 2 and summary["made"] is True
    assert summary["datasets"][0]["skipped"] == {"freed": 1, "missing": 1}
    lines = [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]
    assert [(x["n"], x["dataset"], x["source_n"]) for x in lines] == [
        (0, "B1", 0), (1, "B1", 2), (2, "B2", 0), (3, "B2", 1), (4, "B2", 0), (5, "B2", 1),
        (6, "B1", 4), (7, "B2", 2),
    ]  # fmt: skip
    # the trainer's split (int(n * ratio)) falls exactly there: no copy of a trained row validates
    manifest = prepare.read_manifest(out)
    assert manifest["train_rows"] == 6 and int(8 * manifest["train_ratio"]) == 6
    trained = {(x["dataset"], x["source_n"]) for x in lines[:6]}
    assert not trained & {(x["dataset"], x["source_n"]) for x in lines[6:]}
    assert set(lines[0]) >= {"input_ids", "loss_mask", "seq_len"}
    link = out / "hidden_states" / "hs_1.safetensors"
    # a hard link: freeing the dataset's own file (pull --free) leaves the trainer's
    assert os.path.samefile(link, b1 / "hidden_states" / "hs_2.safetensors")
    assert not link.is_symlink()
    assert sorted(p.name for p in (out / "hidden_states").iterdir())[-1] == "hs_7.safetensors"
    assert json.loads((out / "state.json").read_text())["_format_type"] == "torch"
    assert prepare.lengths(out) == [4] * 8
    assert (
        not (out / prepare.CACHE).exists() and not (tmp_path / "train" / ".data.partial").exists()
    )


def test_the_digest_matches_the_manifest_and_a_same_plan_is_a_no_op(tmp_path):
    b1 = train_data.write_dataset(tmp_path / "hs", "B1", 4)
    the_plan = train_data.plan(tmp_path / "data", (b1, 1))
    first = made(tmp_path, the_plan)
    assert first["digest"] == prepare.plan_digest(the_plan)
    assert prepare.read_manifest(tmp_path / "data")["digest"] == first["digest"]
    again = made(tmp_path, the_plan)
    assert again["made"] is False and again["digest"] == first["digest"]


def test_a_changed_input_is_a_new_digest_and_never_changes_the_folder(tmp_path):
    b1 = train_data.write_dataset(tmp_path / "hs", "B1", 4)
    the_plan = train_data.plan(tmp_path / "data", (b1, 1))
    before = made(tmp_path, the_plan)["digest"]
    (b1 / "hidden_states" / "hs_2.safetensors").unlink()  # e.g. freed since
    assert prepare.plan_digest(the_plan) != before
    run = train_data.run_prepare(tmp_path, the_plan)
    assert run.returncode == 2 and "other inputs" in json.loads(run.stdout)["error"]
    assert prepare.read_manifest(tmp_path / "data")["digest"] == before
    weighted = train_data.plan(tmp_path / "data", (b1, 2))
    assert prepare.plan_digest(weighted) != prepare.plan_digest(the_plan)


def test_a_folder_a_killed_prepare_left_half_made_is_made_again(tmp_path):
    b1 = train_data.write_dataset(tmp_path / "hs", "B1", 3)
    partial = tmp_path / ".data.partial"
    (partial / "hidden_states").mkdir(parents=True)
    (partial / "rows.jsonl").write_text("torn")
    made(tmp_path, train_data.plan(tmp_path / "data", (b1, 1)))
    assert (
        not partial.exists()
        and len((tmp_path / "data" / "rows.jsonl").read_text().splitlines()) == 3
    )


def test_a_draft_vocab_writes_the_reply_tokens_counts(tmp_path):
    b1 = train_data.write_dataset(tmp_path / "hs", "B1", 3)
    made(tmp_path, train_data.plan(tmp_path / "data", (b1, 1), draft_vocab=32))
    counts = json.loads((tmp_path / "data" / "token_freq.pt").read_text())  # the stand-in's JSON
    assert counts["7"] == 3 and "100" not in counts  # the prompt's token carries no loss


def test_plans_that_cannot_be_made_say_why(tmp_path):
    b1 = train_data.write_dataset(tmp_path / "hs", "B1", 2)
    b3 = train_data.write_dataset(tmp_path / "hs", "B3", 2, layers=4)
    for the_plan, why in [
        (train_data.plan(tmp_path / "d1", (b1, 1), (b3, 1)), "differ in (layers"),
        (train_data.plan(tmp_path / "d2", (b1, 0)), "weight 0"),
        (train_data.plan(tmp_path / "d3", (b1, 1.5)), "weight 1.5"),
        (train_data.plan(tmp_path / "d4", (b1, 1), (b1, 1)), "named twice"),
        (train_data.plan(tmp_path / "d5", (tmp_path / "none", 1)), "no row"),
    ]:
        run = train_data.run_prepare(tmp_path, the_plan)
        assert run.returncode == 2 and why in json.loads(run.stdout)["error"], run.stdout


def test_rows_of_reads_a_ledger_up_to_its_torn_line(tmp_path):
    b1 = train_data.write_dataset(tmp_path / "hs", "B1", 3, freed={0})
    with open(b1 / "rows.jsonl", "ab") as f:
        f.write(b'{"n": 3, "id": "B1-0000')  # a line a kill cut
    rows = prepare.rows_of(b1)
    assert [(r.n, r.skip, r.seq_len) for r in rows] == [(0, "freed", 4), (1, "", 4), (2, "", 4)]


def test_each_dataset_holds_out_its_last_tenth_and_the_ratio_splits_exactly_there():
    assert [prepare.held_out(n) for n in (0, 1, 2, 9, 10, 100, 1001)] == [0, 0, 1, 1, 1, 10, 100]
    for n in range(1, 400):
        for trained in range(n):
            assert int(n * prepare.train_ratio(trained, n)) == trained
