"""Unfinished answers continued after a stop, against real vLLM: a greedy job killed -9
mid-answer, then stopped for new code (SIGTERM), then run to the end gives token for token the
records of an uninterrupted greedy run, and vLLM's own generation counter shows that the last start
made no token twice. The tiny model's `--long` variant: 50 words of thinking, `</think>` (a special
token, the configuration where vLLM's streaming parser loses a character), 30 words of answer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from remote.common import metrics, procinfo
from remote.job.engine.kept_tokens import KeptFile
from tests.conftest import REPO, free_port, records, runner_cmd, status, wait_for, write_prompts
from tests.helpers.as_typed import ok, typed
from tests.real_engine import rig
from tests.real_engine.recovery_scenario import engine_cores
from tests.real_engine.vllm_helpers import server_metric

pytestmark = pytest.mark.real_vllm
# ~80k tokens: the tiny model makes ~2,000 tok/s here. Its greedy answers are all alike and start
# together, so they reach each phase in step, and a stop may wait for many appends until one falls
# in the phase it wants: the job must outlast three such waits
N = 960


def generated(url: str) -> float:
    """vLLM's own count of the tokens it made (the product's reader of /metrics)."""
    return server_metric(url.replace("/v1", "/metrics"), metrics.GENERATION, timeout=5)


def job_root(root: Path, url: str, n: int = N) -> Path:
    write_prompts(root / "data" / "prompts" / "B1.jsonl", n, "B1")
    spec = {
        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 80}},
        "engine": {"kind": "openai", "base_url": url, "model": rig.SERVED_NAME, "concurrency": 8},
        "sampling": {"max_tokens": 160, "temperature": 0},
        "extra_body": {"return_token_ids": True},
    }
    (root / "job.json").write_text(json.dumps(spec))
    return root


def running(root: Path, pid: int) -> bool:
    try:
        st = status(root)
    except (OSError, ValueError):
        return False
    return st["pid"] == pid and st["state"] == "running"


def same(rec: dict) -> dict:
    """A record as an uninterrupted one must be. Text compared word for word: the tiny tokenizer's
    decoder puts a space before `</think>` too, and vLLM's chat parser keeps that space in the
    thinking when the marker shares a chunk with the word before it, and not when it comes alone."""
    out = {k: v for k, v in rec.items() if k not in ("created", "continued", "release")}
    msg = dict(out["conversations"][-1])
    for key in ("content", "reasoning_content"):
        msg[key] = " ".join((msg.get(key) or "").split())
    out["conversations"] = out["conversations"][:-1] + [msg]
    return out


def words_of(model: Path, ids: list) -> tuple[str, str]:
    """What the token ids say: the thinking's words, and the answer's (the truth of a record)."""
    vocab = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
    word = {i: w for w, i in vocab.items()}
    end = vocab["</think>"]
    body = ids[:-1] if ids[-1] == vocab["<|im_end|>"] else ids
    k = body.index(end)
    return " ".join(word[i] for i in body[:k]), " ".join(word[i] for i in body[k + 1 :])


def stop_mid_answer(root: Path, path: Path, sig, cut: bool, old: dict) -> None:
    """Start the job, wait until this start's tokens are kept in (cut) or past the thinking, stop it."""
    proc = subprocess.Popen(
        runner_cmd(root, "--grace", "0"),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: running(root, proc.pid), 60, 0.05, "the runner running")

    def cut_now() -> bool:
        kept = KeptFile.read(path).items()
        return any(v.thinking is cut and old.get(k) != len(v.ids) for k, v in kept)

    wait_for(cut_now, timeout=240, interval=0.05, what="tokens kept mid-answer")
    assert proc.poll() is None, "the job ended before this stop: raise N"
    proc.send_signal(sig)
    proc.wait(timeout=60)


@pytest.fixture(scope="module")
def served(tmp_path_factory, vllm_python, vllm_exe):
    """One vLLM start for the module: the long variant's model, the url, its session id."""
    where = tmp_path_factory.mktemp("continue")
    model = rig.build_model(where / "model", vllm_python, long=True)
    with rig.serving(vllm_exe, model, free_port(), where / "vllm.log") as (url, sid):
        yield model, url, sid


@pytest.fixture(scope="module")
def want(served, tmp_path_factory):
    """The records of the job run once, uninterrupted."""
    model, url, _ = served
    base = job_root(tmp_path_factory.mktemp("base"), url)
    subprocess.run(runner_cmd(base), cwd=REPO, check=True, capture_output=True, timeout=600)
    out = {r["id"]: same(r) for r in records(base, "B1")}
    one = next(iter(out.values()))
    msg = one["conversations"][-1]
    assert len(one["token_ids"]) == 82 and msg["content"] and msg["reasoning_content"]
    for r in out.values():  # no character lost where the thinking ends
        m = r["conversations"][-1]
        assert (m["reasoning_content"], m["content"]) == words_of(model, r["token_ids"])
    return out


@pytest.mark.timeout(900)  # twelve stops and a whole job on real vLLM: ~4 min on two busy cores
def test_a_killed_and_restarted_greedy_job_makes_the_uninterrupted_records(tmp_path, served, want):
    model, url, _ = served
    root = job_root(tmp_path / "cut", url)
    path = root / "run" / "kept.jsonl"
    for sig, cut in ((signal.SIGKILL, True), (signal.SIGTERM, False), (signal.SIGTERM, True)):
        # the 8 greedy streams move in step and the file is appended every 0.05 s: a stop
        # can land just after a batch ended and before the next made a token, and keep
        # nothing of this start; that stop is made again
        for _ in range(4):
            old = {k: len(v.ids) for k, v in KeptFile.read(path).items()}
            stop_mid_answer(root, path, sig, cut, old)
            if any(old.get(k) != len(v.ids) for k, v in KeptFile.read(path).items()):
                break
        else:
            pytest.fail("four stops in a row kept no token of their start")
    kept = {k.split("\t")[1]: v for k, v in KeptFile.read(path).items()}
    assert kept and all(k.ids for k in kept.values())
    recorded = {r["id"] for r in records(root, "B1")}
    before = generated(url)
    subprocess.run(runner_cmd(root), cwd=REPO, check=True, capture_output=True, timeout=600)
    made_now = generated(url) - before
    got = {r["id"]: r for r in records(root, "B1")}
    assert {k: same(r) for k, r in got.items()} == want  # token for token, text for text
    assert {r["id"] for r in got.values() if r.get("continued")} >= set(kept)
    # vLLM's own counter: the last start made what was missing, no kept token again
    missing = sum(
        len(r["token_ids"]) - len(kept[i].ids if i in kept else ())
        for i, r in got.items()
        if i not in recorded
    )
    assert made_now == missing
    st = status(root)["kept"]
    assert st["continued"] == len(kept)
    assert st["tokens_saved"] == sum(len(k.ids) for k in kept.values())


def settled(read):
    """A predicate true once `read()` gives the same value twice in a row (nothing moves any more:
    the engine is stopped, so only what was in transit can still arrive)."""
    last = [object()]

    def same_again() -> bool:
        now = read()
        again, last[0] = now == last[0], now
        return again

    return same_again


def test_a_runner_killed_under_the_watcher_is_continued_from_every_kept_token(
    tmp_path, served, want
):
    """The default settings, as a user runs the job: `invoke restart` on the built-in local host,
    the runner killed -9 mid-answer, the watcher starting it again at once. The engine is held
    (SIGSTOP) around the kill so the test knows exactly what was in flight: every token the dead
    runner had received is in the kept file, and the job makes none of them again."""
    model, url, sid = served
    proj, host = tmp_path / "proj", tmp_path / "host"
    n = 160
    job = json.loads((job_root(proj, url, n) / "job.json").read_text())
    cfg = proj / "hosts.yaml"
    hosts = {"local": {"connect": "local", "remote_dir": str(host), "python": sys.executable}}
    cfg.write_text(yaml.safe_dump({"default_host": "local", "hosts": hosts, "job": job}))
    ok("invoke deploy", cfg)
    start = generated(url)
    cores = engine_cores(sid)
    assert cores
    for p in cores:
        os.kill(p, signal.SIGSTOP)
    try:
        ok("invoke restart", cfg)
        _kill_under_the_watcher(cfg, host, url, cores, start, n, want)
    finally:  # a failed check leaves no watcher restarting runners behind, nor the engine held
        for p in cores:
            os.kill(p, signal.SIGCONT)
        typed("invoke stop", cfg)


def _hold_with_answers_in_flight(host, url, cores, start):
    """The engine held (SIGSTOP) from before the job's start: let it make a token, hold it again,
    and wait until every token it made for an answer in flight is in the kept file; again if that
    token ended a batch of answers. Held first and looked at after, and the job unable to run
    between the holds: it cannot end before one lands mid-answer, however slow the machine."""
    path = host / "run" / "kept.jsonl"

    def snapshot():
        done = sum(len(r["token_ids"]) for r in records(host, "B1"))
        kept_now = sum(len(v.ids) for v in KeptFile.read(path).values())
        return generated(url) - start - done, kept_now

    for _ in range(50):
        made = generated(url)
        for p in cores:
            os.kill(p, signal.SIGCONT)
        wait_for(lambda made=made: generated(url) > made, 240, 0.02, "a token made for the job")
        for p in cores:
            os.kill(p, signal.SIGSTOP)
        moved = settled(snapshot)

        def at_rest(moved=moved) -> bool:  # nothing in transit, every token in flight kept
            return moved() and snapshot()[0] == snapshot()[1]

        wait_for(at_rest, 120, 0.2, "every token of the answers in flight in the kept file")
        if snapshot()[0] > 0:
            return
    raise AssertionError("fifty holds found no answer in flight")


def half_closed(url: str) -> int:
    """The server's connections whose client has gone and that it has not yet closed (CLOSE_WAIT
    on its port): it has not yet seen those clients go, nor asked its engine to drop their requests."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            count += int(local.rsplit(":", 1)[1], 16) == port and state == "08"
    return count


def _kill_under_the_watcher(cfg, host, url, cores, start, n, want):
    path = host / "run" / "kept.jsonl"
    _hold_with_answers_in_flight(host, url, cores, start)
    try:
        pid = status(host)["pid"]
        os.kill(pid, signal.SIGKILL)
        at_kill = generated(url)
        kept = {k.split("\t")[1]: v for k, v in KeptFile.read(path).items()}
        recorded = {r["id"] for r in records(host, "B1")}
        # the engine stays held until the server has seen the dead runner's connections go (a busy
        # machine slows that, not the engine's steps): its requests get no step more than that
        # every thread gone, not only the first: a killed process's first thread shows Z while its
        # other threads still hold its files, its sockets among them (this look, of the first thread
        # only, let the engine go with the dead runner's requests still open: they ran to their end,
        # 639 tokens over the bound under load)
        wait_for(lambda: not procinfo.alive(pid), 120, 0.05, "the killed runner gone")
        wait_for(lambda: half_closed(url) == 0, 120, 0.05, "the server to see its clients gone")
    finally:
        for p in cores:
            os.kill(p, signal.SIGCONT)
    assert kept and all(k.ids for k in kept.values())

    def finished() -> bool:
        st = status(host)
        return st["pid"] != pid and st["state"] == "finished"

    wait_for(finished, 600, 0.2, "the watcher's runner to finish the job")
    events = [json.loads(x) for x in (host / "run" / "recover.jsonl").read_text().splitlines()]
    seen = [e["event"] for e in events if e["what"] == "runner"]
    assert seen[0] == "died" and "restarted" in seen  # (a start slowed by a busy machine: retried)
    got = {r["id"]: r for r in records(host, "B1")}
    assert {k: same(r) for k, r in got.items()} == {k: want[k] for k in got} and len(got) == n
    assert {r["id"] for r in got.values() if r.get("continued")} >= set(kept)
    missing = sum(
        len(r["token_ids"]) - len(kept[i].ids if i in kept else ())
        for i, r in got.items()
        if i not in recorded
    )
    # vLLM's counter: after the kill the job made what was missing; the dead runner's requests got
    # at most the step the engine was in when held and one before their drop reached it
    assert 0 <= generated(url) - at_kill - missing <= 2 * len(kept)
    ok("invoke stop", cfg)
