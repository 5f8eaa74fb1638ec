"""A job against real vLLM heals itself: the runner killed -9, the API server killed -9, its EngineCore
SIGSTOPped; the host's watcher brings each back with nobody at the keyboard and the job finishes with
every prompt recorded once. Run by `bash scripts/test-real.sh`."""

from __future__ import annotations

import json

import pytest

from remote.common import procinfo
from remote.common.state import ProcessRecord
from tests.conftest import (
    base_job,
    cli,
    free_port,
    records,
    ssh_host_entry,
    status,
    wait_for,
    write_config,
    write_prompts,
)
from tests.real_engine import recovery_scenario, rig

pytestmark = pytest.mark.real_vllm

# ~29k tokens: each failure waits for 500 tokens made since the one before, and no token is made
# while a server loads, so the job outlasts the three failures tenfold, however slow the machine
N = 600
WEDGED_AFTER = 10.0


def real_config(project, host_dir, ssh_rig, tiny_model, vllm_exe, vllm_python, n=N, recover=None):
    write_prompts(project / "data" / "prompts" / "B1.jsonl", n, "B1")
    port = free_port()
    spec = base_job(
        datasets={"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 48}},
        engine={
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "model": rig.SERVED_NAME,
            "concurrency": 16,
            "metrics_interval": 1,
            "retry_base": 0.2,
            "down_deadline": 20.0,  # shorter than a reload: the runner must wait for the watcher
        },
    )
    spec["sampling"] = {"max_tokens": 48, "temperature": 1.0}
    spec["extra_body"] = {"return_token_ids": True}
    events = project / "events.log"
    spec["notify"] = {"command": f'echo "$DEPLOYTOOL_EVENT $DEPLOYTOOL_MESSAGE" >> {events}'}
    return write_config(
        project,
        {"gpu": ssh_host_entry(ssh_rig, host_dir, python=vllm_python)},
        job=spec,
        server={
            "command": str(vllm_exe),
            "model": str(tiny_model),
            "port": port,
            "args": [*rig.BASE_ARGS, "--max-num-seqs", "4"],
            "env": rig.SERVER_ENV,
            "ready_timeout": 300,
        },
        recover=recover or {"backoff": 1, "wedged_after": WEDGED_AFTER},
    )


@pytest.mark.timeout(1200)
def test_real_vllm_job_heals_itself_every_prompt_once(
    tmp_path, ssh_rig, tiny_model, vllm_exe, vllm_python
):
    host = tmp_path / "host"
    cfg = real_config(tmp_path / "p", host, ssh_rig, tiny_model, vllm_exe, vllm_python)
    try:
        assert cli(cfg, "deploy").returncode == 0
        res = cli(cfg, "restart", timeout=400)  # starts the server first: the job needs it
        assert res.returncode == 0, res.stdout + res.stderr
        failures = recovery_scenario.run(host, WEDGED_AFTER)
        for f in failures:
            print(f)
        w = json.loads((host / "run" / "watch.json").read_text())
        assert w["runner"]["restarts"] == 1 and w["server"]["restarts"] == 2
        assert "wedged" in w["server"]["last_cause"]
        assert "EngineCore stopped: /v1/models 200" in failures[2].notes[0]  # alive, not working
        wait_for(
            lambda: status(host)["state"] in ("finished", "failed"), 600, 0.5, "the job to end"
        )
        st = status(host)
        assert st["state"] == "finished", st["message"]
        ids = [r["id"] for r in records(host, "B1")]
        assert len(ids) == N and len(set(ids)) == N  # none lost, none twice, through all three
        events = (tmp_path / "p" / "events.log").read_text()
        assert events.count("server_restarted ") == 2 and events.count("runner_restarted ") == 1
        out = cli(cfg, "status")
        assert "server restarted 2x by the watcher" in out.stdout, out.stdout
    finally:
        cli(cfg, "stop", "--grace", "0")
        cli(cfg, "server.stop", "--grace", "0")
    rec = json.loads((host / "run" / "server.pid").read_text())
    wait_for(lambda: not procinfo.session_members(rec["sid"]), 30, what="server processes gone")
    assert not ProcessRecord.live(host / "run" / "watcher.pid")
