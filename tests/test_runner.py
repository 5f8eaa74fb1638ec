"""The remote runner against a real OpenAI-compatible HTTP server (tests/openai_server.py)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.common.caps import Caps
from remote.common.jobspec import Paths
from remote.host.facts.intent import keep_caps
from remote.job.store.outputs import encode_record, load_existing, repair_tail
from remote.job.store.prompts import PromptFile
from tests.conftest import REPO, outputs, records, runner_cmd, status, wait_for, write_prompts
from tests.helpers.runner_jobs import make_root, run


def ids(root: Path, ds: str) -> list[str]:
    return [r["id"] for r in records(root, ds)]


def expected(ds: str, n: int) -> list[str]:
    return [f"{ds}-{i:06d}" for i in range(n)]


def test_caps_per_dataset_caps_and_selection(tmp_path, openai_server):
    srv = openai_server()
    root = make_root(tmp_path, {"B1": 20, "B2": 20, "B3": 20}, {"base_url": srv.url})
    res = run(root, "--max-samples", "7", "--cap", "B2=3", "--datasets", "B1,B2")
    assert res.returncode == 0, res.stderr
    assert sorted(ids(root, "B1")) == expected("B1", 7)
    assert sorted(ids(root, "B2")) == expected("B2", 3)
    assert ids(root, "B3") == []
    st = status(root)
    assert st["state"] == "finished"
    assert (
        st["datasets"]["B1"] | {}
        and st["datasets"]["B1"]["done"] == 7
        and st["datasets"]["B1"]["target"] == 7
    )
    assert st["datasets"]["B2"]["state"] == "complete"
    rec = records(root, "B1")[0]
    assert rec["conversations"][-1]["role"] == "assistant"
    assert rec["conversations"][-1]["reasoning_content"] == "thinking"
    assert rec["finish_reason"] == "stop" and rec["usage"]["completion_tokens"] > 0
    assert rec["model"] == "test-model" and rec["dataset"] == "B1"


def test_cap_larger_than_dataset_takes_all(tmp_path, openai_server):
    srv = openai_server()
    root = make_root(tmp_path, {"B1": 5}, {"base_url": srv.url})
    assert run(root, "--max-samples", "7000").returncode == 0
    assert sorted(ids(root, "B1")) == expected("B1", 5)
    assert status(root)["datasets"]["B1"]["target"] == 5


def test_token_budget_sends_no_more_than_it_needs_whatever_the_window(tmp_path, openai_server):
    srv = openai_server(tokens=100)
    root = make_root(tmp_path, {"B1": 50}, {"base_url": srv.url, "concurrency": 1})
    assert run(root, "--max-tokens", "350").returncode == 0
    assert len(ids(root, "B1")) == 4  # 100, 200, 300 < 350; the 4th reaches it
    # a window of 16 sent 16 (1,600 tokens for a budget of 350): the answers in flight, at the
    # dataset's mean (est_tokens until measured), would reach the budget, so no more is sent
    root2 = make_root(tmp_path / "b", {"B1": 50}, {"base_url": srv.url, "concurrency": 16})
    assert run(root2, "--max-tokens", "350").returncode == 0
    assert len(ids(root2, "B1")) == 4
    st = status(root2)["datasets"]["B1"]
    assert st["budget_reached"] and st["state"] == "complete"


def _prewrite(root: Path, ds: str, n: int, tokens: int = 100) -> None:
    out = outputs(root)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{ds}.jsonl", "ab") as f:
        for i in range(n):
            f.write(
                encode_record(
                    {
                        "id": f"{ds}-{i:06d}",
                        "dataset": ds,
                        "index": i,
                        "finish_reason": "stop",
                        "usage": {"prompt_tokens": 5, "completion_tokens": tokens},
                        "conversations": [],
                        "model": "test-model",
                        "created": 0,
                    }
                )
            )
    (out / f"{ds}.meta.json").write_text(
        json.dumps(
            {
                "model": "test-model",
                "sampling": {"max_tokens": 512, "temperature": 1.0},
                "chat_template_kwargs": {"thinking": True},
            }
        )
    )


def test_worked_example_b1_complete_b2_resumes_to_cap(tmp_path, openai_server):
    """The worked example scaled by 1/100: B1 100 prompts all done, B2 147 prompts with 16 done, --max-samples 70."""
    srv = openai_server()
    root = make_root(tmp_path, {"B1": 100, "B2": 147, "B3": 90}, {"base_url": srv.url})
    _prewrite(root, "B1", 100)
    _prewrite(root, "B2", 16)
    res = run(root, "--max-samples", "70")
    assert res.returncode == 0, res.stderr
    assert len(ids(root, "B1")) == 100  # already complete under the new cap: untouched
    b2 = ids(root, "B2")
    assert len(b2) == len(set(b2)) == 70 and sorted(b2) == expected("B2", 70)
    assert sorted(ids(root, "B3")) == expected("B3", 70)
    # the server never saw a prompt whose record existed
    asked = {json.loads(k)[0]["content"] for k in srv.attempts}
    assert not any(q.startswith("question") and " of B1" in q for q in asked)
    assert not any(f"question {i} of B2" in asked for i in range(16))
    log = (root / "logs" / "runner.log").read_text()
    assert "B1: 70/70 done, already complete" in log
    assert "B2: 16/70 done, 54 to do" in log


def test_kill_9_at_random_moments_then_resume_exactly_once(tmp_path, openai_server):
    srv = openai_server(latency=0.01)
    root = make_root(tmp_path, {"B1": 150, "B2": 150}, {"base_url": srv.url, "concurrency": 16})
    rng = random.Random(1)
    for _ in range(6):
        proc = subprocess.Popen(
            runner_cmd(root), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.3, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for ds in (
            "B1",
            "B2",
        ):  # whatever state the kill left, every line is either complete or repaired on start
            p = outputs(root) / f"{ds}.jsonl"
            if p.exists() and rng.random() < 0.5:
                with open(p, "ab") as f:
                    f.write(b'{"id": "B1-torn", "dataset": "B1", "ind')  # simulate a torn write
    res = run(root)
    assert res.returncode == 0, res.stderr
    for ds in ("B1", "B2"):
        got = ids(root, ds)
        assert len(got) == len(set(got)), "duplicate id after resume"
        assert sorted(got) == expected(ds, 150)


def test_injected_5xx_429_malformed_and_timeouts_all_complete(tmp_path, openai_server):
    srv = openai_server(fail_rate=0.10, rate_limit_rate=0.05, malformed_rate=0.05, hang_rate=0.02)
    root = make_root(
        tmp_path, {"B1": 120}, {"base_url": srv.url, "concurrency": 16, "request_timeout": 1}
    )
    res = run(root)
    assert res.returncode == 0, res.stderr
    assert sorted(ids(root, "B1")) == expected("B1", 120)
    assert not (outputs(root) / "B1.errors.jsonl").read_text()
    assert status(root)["retries"] > 0


def test_permanent_error_lands_in_errors_file_and_is_retried_on_restart(tmp_path, openai_server):
    srv = openai_server(bad_request_ids={"question 3 of B1"})
    root = make_root(tmp_path, {"B1": 10}, {"base_url": srv.url})
    assert run(root).returncode == 0
    assert sorted(ids(root, "B1")) == [i for i in expected("B1", 10) if i != "B1-000003"]
    errs = [
        json.loads(line) for line in (outputs(root) / "B1.errors.jsonl").read_text().splitlines()
    ]
    assert [e["id"] for e in errs] == ["B1-000003"] and "HTTP 400" in errs[0]["error"]
    st = status(root)
    assert st["datasets"]["B1"]["state"] == "incomplete" and st["errors"] == 1
    srv.bad_request_ids.clear()
    assert run(root).returncode == 0
    assert sorted(ids(root, "B1")) == expected("B1", 10)


def test_torn_last_line_is_repaired_and_kept_aside(tmp_path, openai_server):
    srv = openai_server()
    root = make_root(tmp_path, {"B1": 5}, {"base_url": srv.url})
    _prewrite(root, "B1", 3)
    out = outputs(root) / "B1.jsonl"
    with open(out, "ab") as f:
        f.write(b'{"id": "B1-000003", "dataset": "B1", "index": 3, "finish_re')
    assert run(root).returncode == 0
    assert sorted(ids(root, "B1")) == expected("B1", 5)
    assert (outputs(root) / "B1.jsonl.torn").read_bytes().startswith(b'{"id": "B1-000003"')


def test_fingerprint_mismatch_refused_unless_force(tmp_path, openai_server):
    srv = openai_server()
    root = make_root(tmp_path, {"B1": 6}, {"base_url": srv.url})
    assert run(root, "--max-samples", "2").returncode == 0
    job = json.loads((root / "job.json").read_text())
    job["sampling"]["temperature"] = 0.6
    (root / "job.json").write_text(json.dumps(job))
    res = run(root)
    assert res.returncode == 2
    assert "different sampling" in res.stderr and "--force" in res.stderr
    # refused: nothing of the job changed, its status the last runner's verdict
    assert len(ids(root, "B1")) == 2 and status(root)["state"] == "finished"
    assert run(root, "--force").returncode == 0
    assert len(ids(root, "B1")) == 2  # by hand too, the job keeps its caps
    # no record made with the new settings: the dataset is still what its records were made with
    meta = json.loads((outputs(root) / "B1.meta.json").read_text())
    assert meta["sampling"]["temperature"] == 1.0 and "previous" not in meta
    # the flag is given once: the settings it took stand for the next start too
    assert meta["accepted"]["sampling"]["temperature"] == 0.6
    assert run(root).returncode == 0
    assert run(root, "--max-samples", "all").returncode == 0
    assert len(ids(root, "B1")) == 6
    meta = json.loads((outputs(root) / "B1.meta.json").read_text())
    assert (
        meta["sampling"]["temperature"] == 0.6
        and meta["previous"][0]["sampling"]["temperature"] == 1.0
        and "accepted" not in meta
    )
    # where the first record made with the new settings begins: an export places the change by it
    lines = (outputs(root) / "B1.jsonl").read_bytes().splitlines(keepends=True)
    first_new = next(i for i, x in enumerate(lines) if json.loads(x)["id"] == "B1-000002")
    assert meta["since"] == sum(map(len, lines[:first_new])) and "since" not in meta["previous"][0]
    # back to the first settings: its latest records were not made with them, and not all of them
    # were made with others either
    job["sampling"]["temperature"] = 1.0
    (root / "job.json").write_text(json.dumps(job))
    res = run(root)
    assert res.returncode == 2 and "B1: its records were made with different" in res.stderr
    assert len(ids(root, "B1")) == 6 and status(root)["datasets"]["B1"]["done"] == 6
    assert status(root)["state"] == "finished"


def test_a_start_refused_for_its_settings_names_every_dataset_and_leaves_the_status(
    tmp_path, openai_server
):
    """By hand (`python -m remote run`): it named the first dataset only, and wrote a failed job
    with no figures over the finished one."""
    srv = openai_server()
    root = make_root(tmp_path, {"B1": 2, "B2": 2}, {"base_url": srv.url})
    assert run(root).returncode == 0
    before = (root / "run" / "status.json").read_text()
    job = json.loads((root / "job.json").read_text())
    job["sampling"]["temperature"] = 0.6
    (root / "job.json").write_text(json.dumps(job))
    res = run(root)
    assert res.returncode == 2
    assert "B1, B2: their records were made with different sampling" in res.stderr, res.stderr
    assert (root / "run" / "status.json").read_text() == before


def test_engine_down_waits_then_fails_after_deadline(tmp_path):
    from tests.conftest import free_port

    root = make_root(
        tmp_path,
        {"B1": 3},
        {"base_url": f"http://127.0.0.1:{free_port()}/v1", "down_deadline": 1.5},
    )
    res = run(root)
    assert res.returncode == 1
    st = status(root)
    assert st["state"] == "failed" and "engine unreachable" in st["message"]
    assert st["engine"]["reachable"] is False
    assert "engine unreachable" in (root / "logs" / "runner.log").read_text()


def test_sigterm_finishes_in_flight_and_stops(tmp_path, openai_server):
    srv = openai_server(latency=1.0)
    root = make_root(tmp_path, {"B1": 100}, {"base_url": srv.url, "concurrency": 4})
    proc = subprocess.Popen(
        runner_cmd(root, "--grace", "10"), cwd=REPO, stderr=subprocess.PIPE, text=True
    )
    wait_for(lambda: srv.in_flight == 4, what="4 requests in flight")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    st = status(root)
    assert st["state"] == "stopped"
    assert len(ids(root, "B1")) >= 4  # the in-flight ones finished inside the grace period
    assert sum(srv.requests.values()) == len(ids(root, "B1"))


def test_second_runner_is_refused_by_the_lock(tmp_path, openai_server):
    srv = openai_server(latency=0.5)
    root = make_root(tmp_path, {"B1": 50}, {"base_url": srv.url, "concurrency": 2})
    proc = subprocess.Popen(runner_cmd(root), cwd=REPO, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (root / "run" / "status.json").exists(), what="status")
        res = run(root)
        assert res.returncode == 1 and "already running" in res.stderr
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("start, new", [(20, 30), (200, 12)])
def test_live_recap_through_control_file(tmp_path, openai_server, start, new):
    srv = openai_server(latency=0.3)
    root = make_root(tmp_path, {"B1": 200}, {"base_url": srv.url, "concurrency": 2})
    proc = subprocess.Popen(
        runner_cmd(root, "--max-samples", str(start)), cwd=REPO, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: len(ids(root, "B1")) >= 2, what="first records")
        keep_caps(Paths(root), Caps(max_samples=new))  # what `restart` does: keep, then nudge
        (root / "run" / "control.json").write_text(json.dumps({"seq": 1, "recap": True}))
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    got = ids(root, "B1")
    assert len(got) == len(set(got)) and set(expected("B1", new)) <= set(got)
    assert len(got) == new if new > start else len(got) < start
    st = status(root)
    assert st["control_seq"] == 1 and st["datasets"]["B1"]["target"] == new
    assert max(srv.attempts.values()) == 1  # nothing asked twice: the re-cap lost no request


def test_simulate_engine_runs_without_a_server(tmp_path):
    root = make_root(
        tmp_path,
        {"B1": 10, "B8": 4},
        {"kind": "simulate", "tokens_per_s": 1_000_000},
        est={"B8": 8000},
    )
    assert run(root).returncode == 0
    recs = records(root, "B8")
    assert len(recs) == 4 and all(r["model"] == "simulated" for r in recs)
    lengths = [r["usage"]["completion_tokens"] for r in records(root, "B1") + recs]
    assert len(set(lengths)) > 1  # long-tailed, not constant
    assert "simulate" in (root / "logs" / "runner.log").read_text()


def test_run_inference_alias(tmp_path, openai_server):
    srv = openai_server()
    root = make_root(tmp_path, {"B1": 3}, {"base_url": srv.url})
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "remote.run_inference",
            "--root",
            str(root),
            "--job",
            str(root / "job.json"),
            "--max-samples",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert len(ids(root, "B1")) == 2


def test_bad_flags_exit_2(tmp_path):
    root = make_root(tmp_path, {"B1": 3}, {})
    assert run(root, "--max-samples", "-3").returncode == 2
    assert run(root, "--cap", "B1").returncode == 2
    assert run(root, "--max-tokens", "lots").returncode == 2
    res = run(root, "--datasets", "B9")
    assert res.returncode == 2 and "unknown dataset B9" in res.stderr


# ------------------------------------------------------------------ units


def test_prompt_formats(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(
        "\n".join(
            [
                json.dumps({"messages": [{"role": "user", "content": "a"}]}),
                json.dumps(
                    {
                        "conversations": [
                            {"from": "human", "value": "b"},
                            {"from": "gpt", "value": "old"},
                        ]
                    }
                ),
                json.dumps({"id": "x7", "conversations": [{"role": "user", "content": "c"}]}),
                "",
                json.dumps({"prompt": "d"}),
                "not json",
                json.dumps({"id": "x7", "prompt": "dup"}),
            ]
        )
        + "\n"
    )
    pf = PromptFile(p, "D")
    ps = [pf[i] for i in range(len(pf))]
    pf.close()
    assert [x.id for x in ps[:4]] == ["D-000000", "D-000001", "x7", "D-000003"]
    assert ps[1].messages == [{"role": "user", "content": "b"}]  # the old answer is dropped
    assert ps[3].messages == [{"role": "user", "content": "d"}]
    assert ps[4].messages is None and "invalid prompt line" in ps[4].problem
    assert ps[5].messages is None and "duplicate id" in ps[5].problem


def test_scan_fast_path_matches_json_and_handles_foreign_lines(tmp_path):
    p = tmp_path / "o.jsonl"
    with open(p, "wb") as f:
        for i in range(1000):
            f.write(
                encode_record(
                    {
                        "id": f'B"{i}',
                        "dataset": "B",
                        "index": i,
                        "finish_reason": None,
                        "usage": {"prompt_tokens": 1, "completion_tokens": i},
                        "conversations": [],
                    }
                )
            )
        f.write(b'{"usage": {"completion_tokens": 5}, "id": "hand-written"}\n')
    ex = load_existing(p, update_index=False)
    assert len(ex.ids) == 1001 and ex.tokens['B"7'] == 7 and ex.tokens["hand-written"] == 5


def test_repair_tail_cuts_invalid_last_line(tmp_path):
    p = tmp_path / "o.jsonl"
    p.write_bytes(b'{"id": 1}\n{"id": 2}\n{"id": 3, \n')
    assert repair_tail(p) > 0
    assert p.read_bytes() == b'{"id": 1}\n{"id": 2}\n'
    assert repair_tail(p) == 0


def test_sidecar_index_is_used_trimmed_and_rebuilt(tmp_path):
    from remote.job.store.outputs import AppendFile, index_path, load_existing

    out = tmp_path / "B1.jsonl"
    f = AppendFile(out, indexed=True)
    for i in range(50):
        rec = {
            "id": f"B1-{i:06d}",
            "dataset": "B1",
            "index": i,
            "finish_reason": "stop",
            "usage": {"prompt_tokens": 1, "completion_tokens": i},
            "conversations": [],
        }
        f.append(encode_record(rec), rec["id"], i)
    f.close()
    idx = index_path(out)
    assert len(idx.read_text().splitlines()) == 50
    ex = load_existing(out)
    assert len(ex.ids) == 50 and ex.tokens["B1-000049"] == 49
    # records the index missed (a crash between the two writes) are scanned and indexed
    with open(out, "ab") as fo:
        fo.write(
            encode_record(
                {
                    "id": "late",
                    "dataset": "B1",
                    "index": 50,
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 7},
                }
            )
        )
    with open(idx, "ab") as fi:
        fi.write(b'"B1-0000')  # and the index itself torn
    ex = load_existing(out)
    assert "late" in ex.ids and len(ex.ids) == 51
    assert len(idx.read_text().splitlines()) == 51 and idx.read_bytes().endswith(b"\n")
    # the output cut back (torn-line repair): index entries past the end go
    data = out.read_bytes()
    out.write_bytes(data[: data.rfind(b"\n", 0, len(data) - 1) + 1])
    ex = load_existing(out)
    assert "late" not in ex.ids and len(ex.ids) == 50 and len(idx.read_text().splitlines()) == 50
    # an index that describes another file is rebuilt from the file
    out.write_bytes(
        b"".join(
            encode_record(
                {
                    "id": f"X{i}",
                    "dataset": "B1",
                    "index": i,
                    "finish_reason": "stop",
                    "usage": {"prompt_tokens": 1, "completion_tokens": 3},
                }
            )
            for i in range(60)
        )
    )
    ex = load_existing(out)
    assert ex.ids == {f"X{i}" for i in range(60)}
    assert idx.read_text().splitlines()[0].startswith('"X0"\t3\t')


def test_settings_changed_before_any_record_are_simply_recorded(tmp_path, openai_server):
    srv = openai_server()
    root = make_root(tmp_path, {"B1": 0}, {"base_url": srv.url})
    assert run(root).returncode == 0  # meta written, no record yet: the file had no prompt
    assert json.loads((outputs(root) / "B1.meta.json").read_text())["sampling"]["temperature"] == 1
    write_prompts(root / "data" / "prompts" / "B1.jsonl", 4, "B1")
    job = json.loads((root / "job.json").read_text())
    job["sampling"]["temperature"] = 0.3
    (root / "job.json").write_text(json.dumps(job))
    assert run(root, "--max-samples", "2", "--max-tokens", "none").returncode == 0
    assert (
        json.loads((outputs(root) / "B1.meta.json").read_text())["sampling"]["temperature"] == 0.3
    )
    job["sampling"]["temperature"] = 1.0
    (root / "job.json").write_text(json.dumps(job))
    assert run(root).returncode == 2  # now there are records made at 0.3
