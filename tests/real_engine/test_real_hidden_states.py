"""The hidden-states stage against real vLLM and read by speculators 0.9.0's own code
(tests/real_engine/hidden_read.py, in the vLLM environment): vLLM started with the extraction
config (`--speculative-config` extract_hidden_states, `--kv-transfer-config` with the rig's CPU copy
of its example connector: cpu_hidden_states_connector.py, named in the flags the product builds)
writes the files; the stage checks and counts them through a kill -9 of its runner and of its
server; the folder, converted as docs/hidden-states.md says, is
read row by row with no error, every row's hidden states its own tokens', the loss only on the
tokens the target generated. The same read on the stand-in engine's files runs without a server."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from remote.common.jobspec import Paths, ServerSpec
from remote.common.records import Record
from remote.common.stages import HIDDEN_STATES
from remote.host.processes.extraction import stage_spec
from tests.conftest import REPO, free_port, records, runner_cmd, wait_for
from tests.helpers.runner_jobs import make_root, run
from tests.real_engine import rig

pytestmark = pytest.mark.real_vllm


LAYERS = [0, 1, 2]  # the tiny model has two: its embedding's output, then each layer's


def trainer_reads(vllm_python, root: Path, tmp_path: Path, layers: int, hidden: int) -> int:
    """The dataset's folder as pulled, read by speculators' own code; the rows it read."""
    work = tmp_path / "train"
    shutil.copytree(
        Paths(root).hidden_states / "B1", work / "pulled" / "gpu1" / "hidden_states" / "B1"
    )
    res = subprocess.run(
        [vllm_python, str(Path(__file__).with_name("hidden_read.py")), str(work)],
        env=rig.trainers_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    read = json.loads((work / "read.json").read_text())
    want = [r for rec in records(root, "B1") for r in Record.from_json(rec).token_rows()]
    # the trainer's rows are the records' own, token for token, loss only on the replies
    # (compared as a multiset: the tiny vocabulary gives many prompts the same ids)
    assert Counter((tuple(x["input_ids"]), tuple(x["loss_mask"])) for x in read) == Counter(
        (tuple(r.input_ids), tuple(r.loss_mask)) for r in want
    )
    for row in read:
        n = len(
            row["input_ids"]
        )  # the layers but the last are the draft's input, the last its target
        assert row["hidden_states"] == [n, (layers - 1) * hidden]
        assert row["verifier_last_hidden_states"] == [n, hidden]
    return len(read)


def job_with_ids(root: Path, url: str | None) -> dict:
    job = json.loads((root / "job.json").read_text())
    job["extra_body"] = {"return_token_ids": True}
    if url:
        job["engine"].update(base_url=url, model=rig.SERVED_NAME, request_timeout=120)
        job["sampling"] = {"max_tokens": 12, "temperature": 0}
        job["chat_template_kwargs"] = {}
    (root / "job.json").write_text(json.dumps(job))
    return job


@pytest.mark.timeout(1200)
def test_real_vllm_writes_the_files_the_stage_counts_once_through_kills_of_runner_and_server(
    tmp_path, vllm_python, vllm_exe, tiny_model
):
    root = make_root(tmp_path, {"B1": 300}, {"kind": "openai", "concurrency": 8})
    # the flags the product starts the stage's server with, the rig's CPU connector named in them
    hs = {
        "layers": LAYERS,
        "connector": "CpuHiddenStatesConnector",
        "connector_module": "cpu_hidden_states_connector",
    }
    server = stage_spec(
        ServerSpec(model=str(tiny_model), hidden_states=hs), HIDDEN_STATES, Paths(root)
    )
    args, port = list(server.args), free_port()
    env = {"PYTHONPATH": str(Path(__file__).parent)}
    ledger = Paths(root).hidden_states / "B1" / "rows.jsonl"

    def counted() -> int:
        return len(ledger.read_text().splitlines()) if ledger.exists() else 0

    with contextlib.ExitStack() as servers:
        url, sid = servers.enter_context(
            rig.serving(vllm_exe, tiny_model, port, tmp_path / "vllm-1.log", args=args, env=env)
        )
        job = job_with_ids(root, url)
        assert run(root, timeout=600).returncode == 0
        job["engine"]["concurrency"] = 1  # one row at a time: the kill lands mid-stage
        (root / "job.json").write_text(json.dumps(job))
        proc = subprocess.Popen(runner_cmd(root, "--stage", "hidden-states"), cwd=REPO)
        wait_for(lambda: counted() >= 5, timeout=300, what="five rows counted")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert 5 <= counted() < 300
        # the runner again, and its server killed -9 under it with rows in flight: the runner waits
        # for a server on the same port and goes on
        job["engine"]["concurrency"] = 4
        (root / "job.json").write_text(json.dumps(job))
        proc = subprocess.Popen(runner_cmd(root, "--stage", "hidden-states"), cwd=REPO)
        before = counted()
        wait_for(lambda: counted() >= before + 5, timeout=300, what="five rows more")
        os.killpg(sid, signal.SIGSTOP)  # held: the stage cannot end between this look and the kill
        assert counted() < 300
        os.killpg(sid, signal.SIGKILL)
        servers.enter_context(
            rig.serving(vllm_exe, tiny_model, port, tmp_path / "vllm-2.log", args=args, env=env)
        )
        assert proc.wait(600) == 0
    rows = [json.loads(x) for x in ledger.read_text().splitlines()]
    assert [x["n"] for x in rows] == list(range(300)) and len({x["id"] for x in rows}) == 300
    assert {(x["layers"], x["hidden"], x["dtype"]) for x in rows} == {(3, 128, "BF16")}
    assert trainer_reads(vllm_python, root, tmp_path, 3, 128) == 300


def test_speculators_reads_the_stages_rows_and_files_as_they_are(tmp_path, vllm_python):
    root = make_root(tmp_path, {"B1": 12}, {"kind": "simulate", "tokens_per_s": 1e6})
    job_with_ids(root, None)
    assert run(root).returncode == 0
    assert run(root, "--stage", "hidden-states").returncode == 0
    assert trainer_reads(vllm_python, root, tmp_path, 4, 16) == 12
