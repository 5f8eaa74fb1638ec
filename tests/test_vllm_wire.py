"""What current vLLM really sends (tests/openai_server.py `shape="vllm"`), through the CLI over the real
sshd: answers cut inside their thinking, `extra_body`, failures that show their log lines, pre-flight."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import (
    cli,
    error_lines,
    outputs,
    records,
    write_config,
)
from tests.helpers.runner_jobs import wire_job
from tests.helpers.stand_ins import fake_vllm

# ------------------------------------------------------------------ through the CLI


@pytest.mark.parametrize("shape", ["vllm", "classic"])
def test_answers_cut_inside_thinking_are_asked_once_and_kept(project, openai_server, shape):
    srv = openai_server(shape=shape, cut_in_thinking=0.4, latency=0.01)
    cfg, host_dir = wire_job(project, {"base_url": srv.url})
    assert cli(cfg, "deploy").returncode == 0
    res = cli(cfg, "restart", "--max-samples", "40")
    assert res.returncode == 0, res.stderr
    res = cli(cfg, "tail")
    assert res.returncode == 0, res.stdout + res.stderr
    assert len(srv.attempts) == 80 and set(srv.attempts.values()) == {
        1
    }  # every prompt asked exactly once
    cut = 0
    for ds in ("B1", "B2"):
        recs = records(host_dir, ds)
        assert sorted(r["id"] for r in recs) == [f"{ds}-{i:06d}" for i in range(40)]
        assert error_lines(host_dir, ds) == []
        for r in recs:
            turn = r["conversations"][-1]
            assert turn["role"] == "assistant" and turn["reasoning_content"]  # the thinking is kept
            if r["finish_reason"] == "length":
                cut += 1
                assert turn["content"] == "" and r["usage"]["completion_tokens"] == 8192
    assert 16 <= cut <= 48  # ~40% of 80
    st = json.loads((host_dir / "run" / "status.json").read_text())
    assert st["state"] == "finished" and st["retries"] == 0
    assert sum(d["finish_length"] for d in st["datasets"].values()) == cut
    assert sum(d["empty"] for d in st["datasets"].values()) == cut


def test_extra_body_reaches_the_server_and_is_part_of_the_fingerprint(project, openai_server):
    srv = openai_server(shape="vllm")
    extra = {
        "repetition_detection": {"max_pattern_size": 30, "min_pattern_size": 5, "min_count": 4},
        "return_token_ids": True,
    }
    cfg, host_dir = wire_job(project, {"base_url": srv.url}, extra_body=extra)
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "5").returncode == 0
    assert cli(cfg, "tail").returncode == 0
    assert len(srv.bodies) == 10
    for body in srv.bodies:
        assert (
            body["repetition_detection"] == extra["repetition_detection"]
            and body["return_token_ids"] is True
        )
        assert body["top_p"] == 0.95 and body["chat_template_kwargs"] == {"thinking": True}
    rec = records(host_dir, "B1")[0]
    assert (
        rec["token_ids"][:3] == [1000, 1001, 1002]
        and len(rec["token_ids"]) == rec["usage"]["completion_tokens"]
    )
    assert rec["prompt_token_ids"] == list(range(rec["usage"]["prompt_tokens"]))
    meta = json.loads((outputs(host_dir) / "B1.meta.json").read_text())
    assert meta["extra_body"] == extra

    # another extra_body is another run: resuming into the same outputs is refused, with the reason
    # shown, before any runner is started (the host checks what the runner would refuse)
    cfg, _ = wire_job(project, {"base_url": srv.url}, extra_body={"return_token_ids": True})
    assert cli(cfg, "deploy").returncode == 0
    res = cli(cfg, "restart", "--max-samples", "10")
    assert res.returncode == 2, res.stderr
    assert "different extra_body (extra_body.repetition_detection" in res.stderr
    assert "nothing was stopped or started" in res.stderr and "--force" in res.stderr
    assert "Traceback" not in res.stderr and "start-up" not in res.stderr
    assert len(records(host_dir, "B1")) == 5


def test_server_dying_at_start_shows_why_on_one_host(project, tmp_path, ssh_rig):
    exe = fake_vllm(tmp_path)
    cfg, host_dir = wire_job(project, {"base_url": "http://127.0.0.1:9/v1"})
    data = json.loads(
        json.dumps(cfg.path.read_text() and __import__("yaml").safe_load(cfg.path.read_text()))
    )
    data["server"] = {
        "command": str(exe),
        "model": "kimi",
        "port": 9,
        "args": ["--fake-die", "--fake-workers", "0"],
    }
    cfg = write_config(cfg.path.parent, data["hosts"], job=data["job"], server=data["server"])
    assert cli(cfg, "deploy").returncode == 0
    res = cli(cfg, "server.start")
    assert res.returncode == 1
    assert "died during start-up" in res.stderr and "CUDA out of memory" in res.stderr
    assert "Traceback" not in res.stderr


def test_host_python_without_aiohttp_is_caught_before_anything_stops(
    project, openai_server, tmp_path
):
    srv = openai_server(latency=0.3)
    srv.hold_after = 4  # the job is still running when the test looks, however slow the machine
    cfg, host_dir = wire_job(project, {"base_url": srv.url})
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart", "--max-samples", "40").returncode == 0
    pid = json.loads((host_dir / "run" / "runner.pid").read_text())["pid"]

    # a Python whose aiohttp import fails, as on a bare host
    shadow = tmp_path / "shadow" / "aiohttp"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'aiohttp'\")\n"
    )
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nPYTHONPATH={shadow.parent} exec {sys.executable} "$@"\n')
    bare.chmod(0o755)
    cfg, _ = wire_job(project, {"base_url": srv.url}, python=str(bare))

    res = cli(cfg, "hosts")
    assert res.returncode == 1
    assert "cannot import aiohttp" in res.stdout and "hosts.gpu.python" in res.stdout.replace(
        "\n", ""
    )
    res = cli(cfg, "restart", "--max-samples", "40", "--hard")
    assert res.returncode == 1
    assert "nothing was stopped" in res.stderr and "cannot import aiohttp" in res.stderr
    assert "hosts.gpu.python (or defaults.python)" in res.stderr and "Traceback" not in res.stderr
    assert json.loads((host_dir / "run" / "runner.pid").read_text())["pid"] == pid
    from remote.common.state import ProcessRecord

    # the running job is untouched
    assert ProcessRecord.live(host_dir / "run" / "runner.pid") is not None
    cfg, _ = wire_job(project, {"base_url": srv.url})
    assert cli(cfg, "stop", "--grace", "0").returncode == 0
