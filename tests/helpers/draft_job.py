"""The draft stage's job on a `local` host (tests and benchmarks): two datasets of prompts, the
stand-in vLLM (tests/fake_vllm.py) as the job's own server, started by deploytool, with a draft."""

from __future__ import annotations

import yaml

from tests.conftest import free_port, write_prompts
from tests.helpers.stand_ins import fake_vllm


def draft_of(eval_samples: int) -> dict:
    """hosts.yaml's server.draft of these tests: a model id, 3 tokens a step."""
    return {"model": "org/kimi-eagle3", "num_speculative_tokens": 3, "eval_samples": eval_samples}


def drafted_job(
    tmp_path,
    draft: dict | None,
    accept=("of B1=3", "of B2=1"),
    delay=0.0,
    server_args=(),
    notify: str | None = None,
):
    """Two datasets of 12 prompts; the stand-in server accepts 3 of the draft's 3 tokens a step
    for B1's prompts and 1 for B2's (mean acceptance lengths 4 and 2). `server_args`: more of the
    stand-in's flags; `notify`: job.notify's command."""
    port, root = free_port(), tmp_path / "host"
    for ds in ("B1", "B2"):
        write_prompts(tmp_path / "data" / "prompts" / f"{ds}.jsonl", 12, ds)
    url = f"http://127.0.0.1:{port}/v1"
    job = {
        "datasets": {
            ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 20} for ds in ("B1", "B2")
        },
        "engine": {"kind": "openai", "base_url": url, "model": "kimi", "concurrency": 2},
    }
    if notify:
        job["notify"] = {"command": notify}
    args = ["--fake-delay", "0.1", "--fake-answer-delay", str(delay)]
    for a in accept:
        args += ["--fake-accept", a]
    args += list(server_args)
    server = {
        "command": str(fake_vllm(tmp_path)),
        "model": "kimi",
        "port": port,
        "args": args,
        "ready_timeout": 120,
    }
    if draft is not None:
        server["draft"] = draft
    hosts = {"box": {"connect": "local", "remote_dir": str(root)}}
    data = {"default_host": "box", "hosts": hosts, "job": job, "server": server}
    config = tmp_path / "hosts.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config, root
