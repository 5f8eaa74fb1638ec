"""The hidden-states stage as typed: the same job's three commands (`invoke restart --stage
hidden-states`, `invoke tail`, `invoke status`) make each kept reply's hidden states on the built-in
`local` host; the stage is kept like a cap; a kill -9 of its runner at any moment leaves every row
counted once, each file whole."""

from __future__ import annotations

import json
import signal
import subprocess

import yaml

from remote.common.jobspec import Paths
from remote.common.records import Record
from remote.job.hidden import hsfile
from tests.conftest import REPO, records, runner_cmd, status, wait_for, write_prompts
from tests.helpers.as_typed import ok, typed
from tests.helpers.runner_jobs import make_root, run

TOKEN_IDS = {"return_token_ids": True}


def local_job(tmp_path):
    """hosts.yaml of one `local` host whose job keeps token ids, and the host's remote_dir."""
    write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 4, "B1")
    job = {
        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 100}},
        "engine": {"kind": "simulate", "concurrency": 2, "tokens_per_s": 100_000},
        "extra_body": TOKEN_IDS,
    }
    hosts = {"box": {"connect": "local", "remote_dir": str(tmp_path / "host")}}
    data = {"default_host": "box", "hosts": hosts, "job": job, "recover": False}
    config = tmp_path / "hosts.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config, tmp_path / "host"


def rows(root, ds="B1") -> list[dict]:
    path = Paths(root).hidden_states / ds / "rows.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def assert_whole(root, ds="B1") -> list[dict]:
    """Every row once, numbered 0.., its file the row's tokens, and the rows the records' own."""
    got = rows(root, ds)
    assert [x["n"] for x in got] == list(range(len(got)))
    assert len({x["id"] for x in got}) == len(got)
    want = {r.id: r for rec in records(root, ds) for r in Record.from_json(rec).token_rows()}
    files = Paths(root).hidden_states / ds / "hidden_states"
    for x in got:
        assert x["input_ids"] == want[x["id"]].input_ids
        assert x["loss_mask"] == want[x["id"]].loss_mask
        hsfile.check(files / f"hs_{x['n']}.safetensors", x["input_ids"], x["layers"])
    assert sorted(p.name for p in files.iterdir()) == sorted(
        f"hs_{x['n']}.safetensors" for x in got
    )
    return got


def test_the_stage_runs_with_the_three_commands_and_is_kept_like_a_cap(tmp_path):
    config, root = local_job(tmp_path)
    for line in ("invoke deploy", "invoke restart --max-samples 3", "invoke tail"):
        ok(line, config)
    assert "stage hidden-states" in ok("invoke restart --stage hidden-states", config)
    assert "hidden-states finished" in ok("invoke tail", config)
    assert len(assert_whole(root)) == 3  # the cap holds
    st = json.loads(ok("invoke status --json", config))["box"]
    assert st["stage"] == "hidden-states" and st["state"] == "finished"
    assert st["datasets"]["B1"]["done"] == 3 and st["caps"]["stage"] == "hidden-states"
    assert "stage hidden-states: finished" in ok("invoke status", config)
    # said stays said: a bare restart runs the stage again, and finds nothing left to do
    ok("invoke restart", config)
    ok("invoke tail", config)
    assert status(root)["stage"] == "hidden-states" and len(rows(root)) == 3
    # back to answers, the cap raised; then the stage makes the new ones' rows only
    ok("invoke restart --stage generate --max-samples 4", config)
    ok("invoke tail", config)
    assert status(root)["stage"] == "generate" and len(records(root, "B1")) == 4
    ok("invoke restart --stage hidden-states", config)
    ok("invoke tail", config)
    assert len(assert_whole(root)) == 4


def test_a_bad_stage_name_is_one_line_and_touches_nothing(tmp_path):
    config, root = local_job(tmp_path)
    res = typed("invoke restart --stage hidden", config)
    assert res.returncode == 2 and "expected one of generate, hidden-states" in res.stderr
    assert "Traceback" not in res.stderr and not root.exists()


def test_a_runner_killed_mid_stage_leaves_every_row_counted_once(tmp_path):
    root = make_root(tmp_path, {"B1": 60}, {"kind": "simulate", "tokens_per_s": 1e6})
    job = json.loads((root / "job.json").read_text())
    job["extra_body"] = TOKEN_IDS
    (root / "job.json").write_text(json.dumps(job))
    assert run(root).returncode == 0
    # the stand-in's prefill slowed to ~0.3 s a row: the stage outlasts the kill by construction
    job["engine"].update(tokens_per_s=10, concurrency=2)
    (root / "job.json").write_text(json.dumps(job))
    proc = subprocess.Popen(runner_cmd(root, "--stage", "hidden-states"), cwd=REPO)
    wait_for(lambda: len(rows(root)) >= 3, timeout=60, what="three rows counted")
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    cut = len(rows(root))
    assert 3 <= cut < 60
    ledger = Paths(root).hidden_states / "B1" / "rows.jsonl"
    with open(ledger, "ab") as f:  # and the kill's worst moment: a line half written
        f.write(b'{"n":%d,"id":"B1-0' % cut)
    job["engine"].update(tokens_per_s=1e6, concurrency=8)
    (root / "job.json").write_text(json.dumps(job))
    res = run(root, "--stage", "hidden-states")
    assert res.returncode == 0, res.stderr
    assert len(assert_whole(root)) == 60
    assert "torn" in (root / "logs" / "runner.log").read_text()
