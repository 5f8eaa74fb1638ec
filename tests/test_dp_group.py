"""A vLLM data-parallel group over two hosts (a head and a `--headless` rank, stand-ins from
tests/fake_vllm.py) whose rank dies under a job: requests routed to it hang, the runner abandons and
resends them (every prompt once, none in errors, stuck counted), `server.status` names the dead rank
and the fix, and after the group is stopped and started again the job finishes."""

from __future__ import annotations

import json
import os
import signal

import pytest

from remote.common import procinfo
from tests.conftest import (
    base_job,
    cli,
    free_port,
    outputs,
    records,
    ssh_host_entry,
    status,
    wait_for,
    write_config,
    write_prompts,
)
from tests.helpers.stand_ins import fake_vllm

N = 100


@pytest.mark.slow
def test_a_dead_rank_is_named_and_the_job_finishes_after_the_group_restarts(tmp_path, ssh_rig):
    project = tmp_path / "p"
    project.mkdir()
    write_prompts(project / "data" / "prompts" / "B1.jsonl", N)
    peer = tmp_path / "rank1-engines.json"
    head_port = free_port()
    # while it exists the head holds the last prompt's request, live but unanswered: the job is
    # unfinished until the group restart, however fast or slow the machine, and no prompt is stuck
    # so often that it fails
    hold = tmp_path / "hold"
    group = ["--data-parallel-size", "2", "--data-parallel-size-local", "1"]
    group += ["--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", "13345"]
    fake = ["--fake-delay", "0.2", "--fake-workers", "0", "--fake-engine", "1"]
    fake += ["--fake-dp-peer", str(peer)]
    worker = ssh_host_entry(ssh_rig, tmp_path / "worker")
    worker["server"] = {
        "headless": True,
        "port": free_port(),
        "args": group + fake + ["--headless", "--data-parallel-start-rank", "1"],
    }
    job = base_job(
        engine={
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{head_port}/v1",
            "model": "kimi",
            "concurrency": 8,
            "first_token_timeout": 1,
            "progress_timeout": 1,
            "request_timeout": 600,
            "retry_base": 0.01,
        }
    )
    cfg = write_config(
        project,
        {"head": ssh_host_entry(ssh_rig, tmp_path / "head"), "worker": worker},
        job=job,
        server={
            "command": str(fake_vllm(tmp_path)),
            "model": "kimi",
            "port": head_port,
            "args": group
            + fake
            + [
                "--fake-answer-delay",
                "0.1",
                "--fake-hold-while",
                str(hold),
                "--fake-hold-prompt",
                f"question {N - 1} of B1",
            ],
        },
    )
    both = ("--host", "head,worker")
    head_dir = tmp_path / "head"
    try:
        assert cli(cfg, "deploy", *both).returncode == 0
        res = cli(cfg, "server.start", *both)
        assert res.returncode == 0, res.stdout + res.stderr
        res = cli(cfg, "server.status", *both)
        assert "group broken" not in res.stdout and "engine processes are gone" not in res.stdout
        engine = json.loads(peer.read_text())[0]
        assert procinfo.alive(engine)

        # rank 1's engine dies (its launcher lives on) as the job starts: every second request
        # of the job's hundred hangs from then on, so requests get stuck by construction (killed
        # after its first answers, a fast job had nothing left to send by the kill on a busy machine)
        hold.touch()
        os.kill(engine, signal.SIGKILL)
        res = cli(cfg, "restart", "--host", "head", "--max-samples", str(N))
        assert res.returncode == 0, res.stdout + res.stderr
        wait_for(lambda: len(records(head_dir, "B1")) >= 20, timeout=30, what="answers")
        wait_for(lambda: status(head_dir)["endpoints"][0]["stuck"] >= 3, timeout=30, what="stuck")

        res = cli(cfg, "server.status", *both)
        out = " ".join(res.stdout.split())
        assert res.returncode == 0, res.stderr
        assert "head: server up" in out and "worker: server up" in out
        assert f"but its engine processes are gone: pid {engine} (FAKE::EngineCore" in out
        assert (
            f"worker: rank 1 engine gone (pid {engine}); the group must be restarted: "
            "invoke server.stop --host head,worker && invoke server.start --host head,worker"
        ) in out
        assert "head: rank 0" not in out  # the live rank is not blamed
        assert len(records(head_dir, "B1")) < N  # held: the restart below happens mid-run

        assert cli(cfg, "server.stop", *both).returncode == 0
        res = cli(cfg, "server.status", *both)
        assert "group broken" not in res.stdout and "died" not in res.stdout  # stopped, not dead
        hold.unlink()
        res = cli(cfg, "server.start", *both)
        assert res.returncode == 0, res.stdout + res.stderr
        wait_for(lambda: status(head_dir)["state"] == "finished", timeout=120, what="finish")
        ids = sorted(r["id"] for r in records(head_dir, "B1"))
        assert ids == [f"B1-{i:06d}" for i in range(N)]  # each once
        assert not (outputs(head_dir) / "B1.errors.jsonl").read_text()
        assert status(head_dir)["endpoints"][0]["stuck"] >= 3
        res = cli(cfg, "server.status", *both)
        assert "group broken" not in res.stdout
    finally:
        cli(cfg, "stop", "--host", "head", "--grace", "0")
        cli(cfg, "server.stop", *both, "--grace", "0")
