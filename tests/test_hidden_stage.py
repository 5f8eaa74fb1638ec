"""The hidden-states stage as typed: the same job's three commands (`invoke restart --stage
hidden-states`, `invoke tail`, `invoke status`) make each kept reply's hidden states on the built-in
`local` host; the stage is kept like a cap; a kill -9 of its runner at any moment leaves every row
counted once, each file whole."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess

import yaml

from remote.common.caps import fmt_bytes
from remote.common.jobspec import Paths, flag_value
from remote.common.records import Record
from remote.common.state import ServerRecord
from remote.job.hidden import hsfile
from tests.conftest import REPO, free_port, records, runner_cmd, status, wait_for, write_prompts
from tests.helpers.as_typed import ok, typed
from tests.helpers.runner_jobs import make_root, run
from tests.helpers.stand_ins import fake_vllm

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
    assert "stage generate → hidden-states" in ok("invoke restart --stage hidden-states", config)
    assert "hidden-states finished" in ok("invoke tail", config)
    assert len(assert_whole(root)) == 3  # the cap holds
    st = json.loads(ok("invoke status --json", config))["box"]
    assert st["stage"] == "hidden-states" and st["state"] == "finished"
    assert st["datasets"]["B1"]["done"] == 3 and st["caps"]["stage"] == "hidden-states"
    assert "stage hidden-states: finished" in ok("invoke status", config)
    # plan sizes the stage at its caps: every prompt (4) where three rows are made
    per_token = sum(x["bytes"] for x in rows(root)) / sum(x["tokens"] for x in rows(root))
    out = ok("invoke plan --tokens-per-dataset 1k", config)
    assert "hidden-states stage at these caps:" in out
    made = sum(x["tokens"] for x in rows(root))
    assert f"× {per_token:.0f} B a token: measured on the rows made; {made} of the " in out
    assert " made already); the disk has" in out
    assert "no measured answer throughput" in out  # the stage's rate is of rows, not answers
    # said stays said: a bare restart runs the stage again, and finds nothing left to do
    ok("invoke restart", config)
    ok("invoke tail", config)
    assert status(root)["stage"] == "hidden-states" and len(rows(root)) == 3
    # the rows made are the rows made, whatever stage the job is in when plan is asked
    # (the disk's free space is the machine's now, which other processes move: not compared)
    sized = next(x for x in out.splitlines() if "hidden-states stage at these caps" in x)
    ok("invoke restart --stage generate", config)
    again = ok("invoke plan --tokens-per-dataset 1k", config)
    assert sized.split("; the disk has")[0] + "; the disk has" in again, again
    ok("invoke restart --stage hidden-states", config)
    ok("invoke tail", config)
    # back to answers, the cap raised; then the stage makes the new ones' rows only
    out = ok("invoke restart --stage generate --max-samples 4", config)
    assert "stage hidden-states → generate" in out  # the way back is said too
    assert "B1's target goes up (3 → 4 prompts" in out  # as any raise is, stage or not
    ok("invoke tail", config)
    assert status(root)["stage"] == "generate" and len(records(root, "B1")) == 4
    ok("invoke restart --stage hidden-states", config)
    ok("invoke tail", config)
    assert len(assert_whole(root)) == 4


def test_a_finished_stage_says_its_rate_over_its_life_as_the_answers_do(tmp_path):
    """Once the stage has finished, status's tok/s is its mean over the time its rows were being
    made (starred, as a finished answers' stage says it), the dataset's and the total, not `-`."""
    config, root = local_job(tmp_path)
    for line in ("invoke deploy", "invoke restart --max-samples 3", "invoke tail"):
        ok(line, config)
    data = yaml.safe_load(config.read_text())
    data["job"]["engine"]["tokens_per_s"] = 10  # a row's prefill, 50 tokens a second: seconds
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    ok("invoke deploy", config)
    ok("invoke restart --stage hidden-states", config)
    assert "hidden-states finished" in ok("invoke tail", config)
    assert max(x["tokens"] for x in rows(root)) >= 50  # a second in flight at least: measured
    out = ok("invoke status", config)
    b1 = next(line for line in out.splitlines() if line.split()[:1] == ["B1"])
    assert re.search(r"\s[\d.]+k?\*\s", b1), out
    assert re.search(r"tokens in rows, [\d.]+k?\* tok/s", out), out
    made = json.loads((root / "data" / "hidden_states" / "made.json").read_text())
    assert made["B1"][1] == sum(x["tokens"] for x in rows(root))  # every row's tokens, once


def test_records_without_token_ids_stop_the_stage_with_the_fix(tmp_path):
    config, root = local_job(tmp_path)
    data = yaml.safe_load(config.read_text())
    del data["job"]["extra_body"]  # answers kept without their token ids
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    for line in ("invoke deploy", "invoke restart --max-samples 2", "invoke tail"):
        ok(line, config)
    res = typed("invoke restart --stage hidden-states", config)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "the job's 2 records hold no token ids" in res.stderr
    assert "set job.extra_body.return_token_ids: true" in res.stderr
    assert "hold no token ids" in ok("invoke status", config)
    # the stage's empty ledgers pulled: nothing to fetch, nothing to free
    out = ok(f"invoke pull --hidden-states --free --to {tmp_path / 'pulled'}", config)
    assert "hidden states: rows here none yet; 0 files fetched" in out


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


def served_job(tmp_path):
    """hosts.yaml of a `local` host whose job talks to the server deploytool starts there (the
    stand-in `vllm`), with two layers kept for the stage; and the host's remote_dir."""
    port, root = free_port(), tmp_path / "host"
    write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 4, "B1")
    url = f"http://127.0.0.1:{port}/v1"
    job = {
        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 20}},
        "engine": {"kind": "openai", "base_url": url, "model": "kimi", "concurrency": 2},
        "extra_body": TOKEN_IDS,
    }
    server = {
        "command": str(fake_vllm(tmp_path)),
        "model": "kimi",
        "port": port,
        "args": ["--fake-delay", "0.1"],
        "ready_timeout": 120,
        "hidden_states": {"layers": [1, 3]},
    }
    hosts = {"box": {"connect": "local", "remote_dir": str(root)}}
    data = {"default_host": "box", "hosts": hosts, "job": job, "server": server}
    config = tmp_path / "hosts.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config, root


def live_server(root) -> ServerRecord:
    rec = ServerRecord.live(Paths(root).server_pid)
    assert rec is not None
    return rec


def test_the_stage_gets_its_server_with_the_extraction_config_and_the_answers_theirs(tmp_path):
    config, root = served_job(tmp_path)
    try:
        for line in ("invoke deploy", "invoke restart", "invoke tail"):
            ok(line, config)
        assert len(records(root, "B1")) == 4
        plain = live_server(root)
        assert flag_value(plain.argv, "--kv-transfer-config") is None
        out = ok("invoke restart --stage hidden-states", config)
        assert "runs without the extraction config the hidden-states stage needs" in out
        rec = live_server(root)
        assert rec.pid != plain.pid
        kv = json.loads(flag_value(rec.argv, "--kv-transfer-config"))
        spec = json.loads(flag_value(rec.argv, "--speculative-config"))
        incoming = kv["kv_connector_extra_config"]["shared_storage_path"]
        assert incoming == str(Paths(root).hidden_incoming)
        assert kv["kv_connector"] == "ExampleHiddenStatesConnector"
        assert spec["method"] == "extract_hidden_states"
        assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3]
        ok("invoke tail", config)
        got = assert_whole(root)
        assert len(got) == 4 and {x["layers"] for x in got} == {2}
        # the watcher brings a killed extraction server back as it was started
        os.kill(rec.pid, signal.SIGKILL)
        wait_for(
            lambda: (ServerRecord.live(Paths(root).server_pid) or rec).pid != rec.pid,
            what="the watcher's new server",
        )
        assert live_server(root).argv == rec.argv
        # and back to answers: the extraction flags go (the server would write a file per answer)
        out = ok("invoke restart --stage generate --max-samples all", config)
        assert "runs with the hidden-states extraction config" in out
        assert flag_value(live_server(root).argv, "--kv-transfer-config") is None
        ok("invoke tail", config)
        assert status(root)["stage"] == "generate"
    finally:
        typed("invoke stop", config)
        typed("invoke server.stop", config)


def test_a_stage_whose_server_cannot_be_made_is_refused_before_the_running_one_is_stopped(
    tmp_path,
):
    config, root = served_job(tmp_path)
    try:
        for line in ("invoke deploy", "invoke restart", "invoke tail"):
            ok(line, config)
        plain = live_server(root)
        data = yaml.safe_load(config.read_text())
        del data["server"]["hidden_states"]  # no layers: the model's config.json would say them
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        res = typed("invoke restart --stage hidden-states", config)
        assert res.returncode == 1, res.stdout + res.stderr
        assert "config.json" in res.stderr and "server.hidden_states.layers" in res.stderr
        assert "restarting it" not in res.stdout  # said before anything was stopped: nothing was
        assert live_server(root).pid == plain.pid and status(root)["stage"] == "generate"
    finally:
        typed("invoke stop", config)
        typed("invoke server.stop", config)


def test_pull_takes_the_stages_files_and_frees_each_on_the_host_once_its_copy_matches(tmp_path):
    config, root = local_job(tmp_path)
    for line in ("invoke deploy", "invoke restart --max-samples 3", "invoke tail"):
        ok(line, config)
    ok("invoke restart --stage hidden-states", config)
    ok("invoke tail", config)
    host = Paths(root).hidden_states / "B1"
    sums = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in host.glob("hidden_states/*")
    }
    assert len(sums) == 3
    to = tmp_path / "pulled"
    out = ok(f"invoke pull --hidden-states --free --to {to}", config)
    assert "hidden states: rows here B1 3; 3 files fetched" in out
    assert "freed on the host: 3 files" in out
    here = to / "box" / "hidden_states" / "B1"
    got = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in here.glob("hidden_states/*")}
    assert got == sums  # every file here as it was there, and gone there
    assert not list(host.glob("hidden_states/*"))
    assert (here / "rows.jsonl").read_bytes() == (host / "rows.jsonl").read_bytes()
    for x in rows(root):
        hsfile.check(
            here / "hidden_states" / f"hs_{x['n']}.safetensors", x["input_ids"], x["layers"]
        )
    # the report has the stage's rows, their bytes, and what pull took off the host
    ok(f"invoke report --out {tmp_path / 'r.html'}", config)
    page = (tmp_path / "r.html").read_text()
    stage = page[page.index("<h2>Hidden-states stage</h2>") :]
    row = re.search(r"<tr><td>B1</td>(.*?)</tr>", stage).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row)
    assert cells[0] == "3" and cells[8] == f"3 ({fmt_bytes(sum(x['bytes'] for x in rows(root)))})"
    assert cells[7] == "0 B"  # nothing of it left on the host
    assert "B1: row length in tokens (3 rows)" in stage
    # every stage's runner starts counted, each stage's said (it counted the answers' only)
    assert "2 runner starts (1 generate, 1 hidden-states)" in page
    assert stage.count('class="start"') == 1  # the rows' chart marks the stage's own start
    # the freed rows stay counted: the stage, raised to every prompt, makes the fourth row only
    ok("invoke restart --max-samples all --stage generate", config)
    ok("invoke tail", config)
    ok("invoke restart --stage hidden-states", config)
    ok("invoke tail", config)
    assert [x["n"] for x in rows(root)] == [0, 1, 2, 3]
    assert [p.name for p in host.glob("hidden_states/*")] == ["hs_3.safetensors"]
    # a copy here that is not the host's file is never a reason to free it
    ok(f"invoke pull --hidden-states --to {to}", config)
    copy = here / "hidden_states" / "hs_3.safetensors"
    data = bytearray(copy.read_bytes())
    data[-20] ^= 0xFF  # the same size, one byte changed
    copy.write_bytes(bytes(data))
    out = ok(f"invoke pull --hidden-states --free --to {to}", config)
    assert "B1 row 3: its sha256 differs from the copy's: the next pull fetches it again" in out
    assert (host / "hidden_states" / "hs_3.safetensors").exists() and not copy.exists()
    out = ok(f"invoke pull --hidden-states --free --to {to}", config)
    assert "1 file fetched" in out
    assert "freed on the host: 1 file (" in out
    assert not (host / "hidden_states" / "hs_3.safetensors").exists()


def test_free_without_hidden_states_is_one_line(tmp_path):
    config, _ = local_job(tmp_path)
    res = typed(f"invoke pull --free --to {tmp_path / 'p'}", config)
    assert res.returncode == 2 and "give it with --hidden-states" in res.stderr
    assert "Traceback" not in res.stderr
