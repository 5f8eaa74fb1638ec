"""The job's model against what the servers serve: refused before anything stops, and a runner that
meets a model the server does not serve fails at once instead of filing every prompt as an error."""

from __future__ import annotations

import json

from tests.conftest import cli, error_lines, records, status, write_config, write_prompts
from tests.helpers.runner_jobs import make_root, run, wire_job


def test_a_model_the_server_does_not_serve_is_refused_before_anything_stops(
    project,
    openai_server,
):
    srv = openai_server(latency=0.3, model="tiny", strict_model=True)
    cfg, host_dir = wire_job(project, {"base_url": srv.url, "model": "tiny"})
    assert cli(cfg, "deploy").returncode == 0
    res = cli(cfg, "restart", "--max-samples", "40")
    assert res.returncode == 0, res.stderr
    pid = json.loads((host_dir / "run" / "runner.pid").read_text())["pid"]

    cfg, _ = wire_job(project, {"base_url": srv.url, "model": "moonshotai/Kimi-K2.5"})
    res = cli(cfg, "hosts")
    assert res.returncode == 1
    out = " ".join(res.stdout.split())
    assert "job.engine.model 'moonshotai/Kimi-K2.5' is not served" in out
    assert f"{srv.url} serves tiny" in out and "set job.engine.model to 'tiny'" in out
    assert cli(cfg, "deploy").returncode == 0
    res = cli(cfg, "restart", "--max-samples", "40", "--hard")
    assert res.returncode == 1, res.stdout
    assert res.stderr.startswith(
        "error: nothing was stopped: job.engine.model 'moonshotai/Kimi-K2.5'"
    )
    assert "Traceback" not in res.stderr
    st = status(host_dir)
    assert st["pid"] == pid and st["state"] in ("running", "finished")  # the running job untouched


def test_a_server_that_does_not_answer_yet_is_not_judged(project):
    cfg, _ = wire_job(project, {"base_url": "http://127.0.0.1:9/v1", "model": "tiny"})
    res = cli(cfg, "hosts")
    assert res.returncode == 0, res.stdout + res.stderr


def test_runner_stops_at_once_on_a_model_the_server_does_not_serve(tmp_path, openai_server):
    srv = openai_server(model="tiny", strict_model=True)
    root = make_root(
        tmp_path, {"B1": 60, "B2": 60}, {"base_url": srv.url, "model": "kimi", "concurrency": 8}
    )
    res = run(root)
    assert res.returncode == 1
    st = status(root)
    assert st["state"] == "failed"
    assert "the server refuses the job, not a prompt" in st["message"]
    assert "The model `kimi` does not exist. Valid aliases: tiny." in st["message"]
    # nothing filed: 120 prompts moved to errors by one typo would all have to be asked again
    assert error_lines(root, "B1") == [] and error_lines(root, "B2") == []
    assert records(root, "B1") == [] and st["errors"] == 0
    assert len(srv.bodies) <= 8  # the window's first requests, then no more asking


def test_one_permanent_answer_for_many_prompts_in_a_row_is_the_jobs_fault(tmp_path, openai_server):
    srv = openai_server(bad_request_ids={"question"})  # every prompt: 400 "prompt too long"
    root = make_root(tmp_path, {"B1": 60}, {"base_url": srv.url, "concurrency": 2})
    res = run(root)
    assert res.returncode == 1
    st = status(root)
    assert st["state"] == "failed" and "the same answer for 8 prompts in a row" in st["message"]
    assert error_lines(root, "B1") == []
    assert len(srv.bodies) < 12


def test_permanent_errors_of_single_prompts_are_still_filed_once(tmp_path, openai_server):
    bad = {f"question {i} of B1" for i in (3, 5, 9, 11, 12)}
    srv = openai_server(bad_request_ids={b + '"' for b in bad})
    root = make_root(tmp_path, {"B1": 40}, {"base_url": srv.url, "concurrency": 4})
    assert run(root).returncode == 0
    assert sorted(e["id"] for e in error_lines(root, "B1")) == [
        f"B1-{i:06d}" for i in (3, 5, 9, 11, 12)
    ]
    assert len(records(root, "B1")) == 35


def test_hosts_without_host_lists_every_configured_host(tmp_path):
    for ds in ("B1",):
        write_prompts(tmp_path / "data" / "prompts" / f"{ds}.jsonl", 3, ds)
    cfg = write_config(
        tmp_path,
        {
            "local": {"connect": "local", "remote_dir": str(tmp_path / "a")},
            "second": {"connect": "local", "remote_dir": str(tmp_path / "b")},
        },
    )
    res = cli(cfg, "hosts")
    assert res.returncode == 0, res.stderr
    assert "local (default)" in res.stdout and "second" in res.stdout
    res = cli(cfg, "hosts", "--host", "second")
    assert "second" in res.stdout and "local (default)" not in res.stdout
