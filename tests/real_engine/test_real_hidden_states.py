"""The hidden-states stage's files as speculators 0.9.0's offline trainer reads them, by its own
code (tests/real_engine/hidden_read.py, in the vLLM environment): the stage run on the stand-in
engine (files shaped as vLLM's connector writes them), pulled, converted as docs/hidden-states.md
says, then read row by row with no error; every row's hidden states are its own tokens', and the
loss sits only on the tokens the target generated."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from remote.common.jobspec import Paths
from remote.common.records import Record
from tests.conftest import records
from tests.helpers.runner_jobs import make_root, run

pytestmark = pytest.mark.real_vllm


def test_speculators_reads_the_stages_rows_and_files_as_they_are(tmp_path, vllm_python):
    root = make_root(tmp_path, {"B1": 12}, {"kind": "simulate", "tokens_per_s": 1e6})
    job = json.loads((root / "job.json").read_text())
    job["extra_body"] = {"return_token_ids": True}
    (root / "job.json").write_text(json.dumps(job))
    assert run(root).returncode == 0
    assert run(root, "--stage", "hidden-states").returncode == 0
    work = tmp_path / "train"
    shutil.copytree(Paths(root).hidden_states / "B1", work / "pulled" / "B1")
    res = subprocess.run(
        [vllm_python, str(Path(__file__).with_name("hidden_read.py")), str(work)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    read = json.loads((work / "read.json").read_text())
    want = {}
    for rec in records(root, "B1"):
        for r in Record.from_json(rec).token_rows():
            want[tuple(r.input_ids)] = r
    assert len(read) == len(want) == 12
    for row in read:
        r = want[tuple(row["input_ids"])]  # the trainer's tokens are a record's, exactly
        assert row["loss_mask"] == [0] * len(r.prompt_ids) + [1] * len(r.reply_ids)
        n = len(r.input_ids)  # three layers for the draft's input, the last one its target
        assert row["hidden_states"] == [n, 3 * 16] and row["verifier_last_hidden_states"] == [n, 16]
