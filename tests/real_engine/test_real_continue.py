"""Unfinished answers continued after a stop, against real vLLM: a greedy job killed -9
mid-answer, then stopped for new code (SIGTERM), then run to the end gives token for token the
records of an uninterrupted greedy run, and vLLM's own generation counter shows that the last start
made no token twice. The tiny model's `--long` variant: 50 words of thinking, `</think>` (a special
token, the configuration where vLLM's streaming parser loses a character), 30 words of answer."""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from remote.common import metrics
from remote.job.engine.kept_tokens import KeptFile
from tests.conftest import REPO, free_port, records, runner_cmd, status, wait_for, write_prompts
from tests.real_engine import rig

pytestmark = pytest.mark.real_vllm
# ~80k tokens: the tiny model makes ~2,000 tok/s here. Its greedy answers are all alike and start
# together, so they reach each phase in step, and a stop may wait for many appends until one falls
# in the phase it wants: the job must outlast three such waits
N = 960


def generated(url: str) -> float:
    """vLLM's own count of the tokens it made (the product's reader of /metrics)."""
    with urllib.request.urlopen(url.replace("/v1", "/metrics"), timeout=5) as r:
        return metrics.total(metrics.parse(r.read().decode()), metrics.GENERATION) or 0.0


def job_root(root: Path, url: str) -> Path:
    write_prompts(root / "data" / "prompts" / "B1.jsonl", N, "B1")
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


def test_a_killed_and_restarted_greedy_job_makes_the_uninterrupted_records(
    tmp_path, vllm_python, vllm_exe
):
    model = rig.build_model(tmp_path / "model", vllm_python, long=True)
    with rig.serve(vllm_exe, model, free_port(), tmp_path / "vllm.log") as url:
        base = job_root(tmp_path / "base", url)
        subprocess.run(runner_cmd(base), cwd=REPO, check=True, capture_output=True, timeout=300)
        want = {r["id"]: same(r) for r in records(base, "B1")}
        one = next(iter(want.values()))
        msg = one["conversations"][-1]
        assert len(one["token_ids"]) == 82 and msg["content"] and msg["reasoning_content"]
        for r in want.values():  # no character lost where the thinking ends
            m = r["conversations"][-1]
            assert (m["reasoning_content"], m["content"]) == words_of(model, r["token_ids"])

        root = job_root(tmp_path / "cut", url)
        path = root / "run" / "kept.jsonl"
        for sig, cut in ((signal.SIGKILL, True), (signal.SIGTERM, False), (signal.SIGTERM, True)):
            # the 8 greedy streams move in step and the file is appended once a second: a stop
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
        subprocess.run(runner_cmd(root), cwd=REPO, check=True, capture_output=True, timeout=300)
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
