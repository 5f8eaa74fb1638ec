"""A job for the runner on disk (prompts, job.json) and the runner run on it as a process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import (
    REPO,
    runner_cmd,
    write_prompts,
)


def make_root(tmp_path: Path, sizes: dict[str, int], engine: dict, est: dict | None = None) -> Path:
    root = tmp_path / "root"
    for ds, n in sizes.items():
        write_prompts(root / "data" / "prompts" / f"{ds}.jsonl", n, ds)
    job = {
        "datasets": {
            ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": (est or {}).get(ds, 100)}
            for ds in sizes
        },
        "engine": {
            "kind": "openai",
            "model": "test-model",
            "concurrency": 8,
            "retry_base": 0.01,
            "request_timeout": 5,
            **engine,
        },
        "sampling": {"max_tokens": 512, "temperature": 1.0},
        "chat_template_kwargs": {"thinking": True},
    }
    (root / "job.json").write_text(json.dumps(job))
    return root


def run(root: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        runner_cmd(root, *args), cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def wire_job(project, engine: dict, extra_body: dict | None = None, **host):
    """B1 and B2 (40 prompts each) on the sshd host, asking vLLM's sampling of a thinking model."""
    engine = {"concurrency": 8, "request_timeout": 10, **engine}
    sampling = {"max_tokens": 8192, "temperature": 1.0, "top_p": 0.95}
    cfg = project.make(engine=engine, sampling=sampling, extra_body=extra_body, **host)
    return cfg, project.host_dir
