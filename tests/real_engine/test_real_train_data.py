"""The train stage's data folder as speculators 0.9.0 reads it: made by remote/job/train/prepare.py
in the vLLM environment with the real `datasets` (and speculators' own token counts), then read row
by row by the trainer's ArrowDataset with `on_missing="raise"` (each row's hs_<i> link, its tokens
and layers); and an epoch's steps counted in advance as the trainer's own sampler counts them."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import REPO
from tests.helpers import train_data
from tests.real_engine import rig

pytestmark = pytest.mark.real_vllm


def test_speculators_reads_the_prepared_folder_and_counts_the_steps_as_we_do(tmp_path, vllm_python):
    env = rig.trainers_env()
    b1 = train_data.write_dataset(tmp_path / "hs", "B1", 12, freed={3})
    b2 = train_data.write_dataset(tmp_path / "hs", "B2", 4)
    out = tmp_path / "train" / "data"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(train_data.plan(out, (b1, 1), (b2, 2), draft_vocab=16)))
    made = subprocess.run(
        [vllm_python, "-m", "remote.job.train.prepare", str(plan)],
        cwd=REPO, env={**env, "PYTHONPATH": f"{env['PYTHONPATH']}:{REPO}", "HF_HUB_OFFLINE": "1"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    # B1's 11 rows but its last, B2's 3 twice, then each one's held-out last row
    assert json.loads(made.stdout.strip().splitlines()[-1])["rows"] == 10 + 3 * 2 + 1 + 1
    run = subprocess.run(
        [vllm_python, str(REPO / "tests" / "real_engine" / "train_read.py"), str(out), str(REPO)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    rows = [json.loads(x) for x in (out / "rows.jsonl").read_text().splitlines()]
    split = json.loads((out / "manifest.json").read_text())["train_rows"]  # where training ends
    assert [r[0] for r in got["read"]] == ["train"] * split + ["val"] * (len(rows) - split)
    assert [r[1] for r in got["read"]] == [r["input_ids"] for r in rows]
    assert all(r[2] == [4, 2 * 4] for r in got["read"])  # the aux layers (all but the last), flat
    assert all(ours == theirs for ours, theirs in got["steps"]), got["steps"]
    assert got["token_freq"]["7"] == len(rows) and "100" not in got["token_freq"]
