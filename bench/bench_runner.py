"""The runner's window against the OpenAI test server.

    .venv/bin/python bench/bench_runner.py [--latency 0.5] [--rounds 20] [--records 1000000]

1. Throughput as a fraction of the ideal concurrency / L, with a fixed per-request latency L,
   at concurrency 64, 256 and 1024 (measured at the server: first request in to last answer out).
2. Slot occupancy against a server that models continuous batching (S slots, a per-token time,
   long-tailed output lengths): the runner's continuous window vs a chunked `generate(chunk)` loop.
3. Resume: time to repair + index 1,000,000 existing records and load the prompts before the first
   request (what a restart costs before any GPU work resumes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import subprocess
import tempfile
import time
from pathlib import Path

from common import REPO  # noqa: E402

from remote.common.caps import Caps
from remote.common.jobspec import JobSpec, Paths
from remote.job.loop.runner import Runner
from remote.job.store.outputs import encode_record
from tests.conftest import runner_cmd
from tests.openai_server import FakeOpenAI


def make_root(
    root: Path, n: int, engine: dict, est_tokens: int = 100, max_tokens: int = 512
) -> Path:
    """One dataset B1 of n prompts and a job.json for the OpenAI engine (shared by the benchmarks)."""
    (root / "data" / "prompts").mkdir(parents=True)
    with open(root / "data" / "prompts" / "B1.jsonl", "w") as f:
        for i in range(n):
            f.write(
                json.dumps(
                    {"id": f"B1-{i:07d}", "messages": [{"role": "user", "content": f"q{i}"}]}
                )
                + "\n"
            )
    (root / "job.json").write_text(
        json.dumps(
            {
                "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": est_tokens}},
                "engine": {"kind": "openai", "model": "m", "retry_base": 0.05, **engine},
                "sampling": {"max_tokens": max_tokens},
                "chat_template_kwargs": {},
            }
        )
    )
    return root


def run_runner(root: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        runner_cmd(root),
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - t0


def throughput(latency: float, rounds: int) -> None:
    print(
        f"1. window throughput, fixed latency L = {latency}s, {rounds} rounds of requests per run"
    )
    for conc in (64, 256, 1024):
        srv = FakeOpenAI(latency=latency, tokens=10).start()
        try:
            with tempfile.TemporaryDirectory() as d:
                n = conc * rounds
                root = make_root(Path(d), n, {"base_url": srv.url, "concurrency": conc})
                run_runner(root)
                elapsed = srv.t_last - srv.t_first
                ideal = conc / latency
                got = n / elapsed
                print(
                    f"   concurrency {conc:5d}: {got:8.1f} req/s of ideal {ideal:7.1f} = {got / ideal:.3f}  "
                    f"(max in flight seen by the server: {srv.max_in_flight})"
                )
        finally:
            srv.stop()


def lognormal_lengths(mean: int, sigma: float = 0.8, cap: int = 4096):
    mu = math.log(mean) - sigma * sigma / 2

    def length(key: str) -> int:
        return max(16, min(cap, int(random.Random(key).lognormvariate(mu, sigma))))

    return length


async def chunked_baseline(url: str, n: int, chunk: int) -> None:
    """The old loop: send a chunk, wait for every answer of it, send the next chunk."""
    import aiohttp

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

        async def one(i):
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": f"q{i}"}],
                "max_tokens": 512,
            }
            async with s.post(f"{url}/chat/completions", json=body) as r:
                await r.read()

        for start in range(0, n, chunk):
            await asyncio.gather(*(one(i) for i in range(start, min(n, start + chunk))))


def occupancy(slots: int, n: int, token_time: float) -> None:
    print(
        f"2. slot occupancy: {slots} batch slots, {n} prompts, lognormal lengths (mean 400, sigma 0.8, cap 4096), "
        f"{token_time * 1000:.1f} ms/token"
    )
    for label in (
        "runner (continuous window, concurrency = 2 x slots)",
        "chunked generate, chunk = slots",
        "chunked generate, chunk = 8 x slots",
    ):
        srv = FakeOpenAI(slots=slots, token_time=token_time).start()
        srv.lengths = lognormal_lengths(400)
        try:
            t0 = time.perf_counter()
            if label.startswith("runner"):
                with tempfile.TemporaryDirectory() as d:
                    root = make_root(Path(d), n, {"base_url": srv.url, "concurrency": 2 * slots})
                    run_runner(root)
            else:
                asyncio.run(chunked_baseline(srv.url, n, slots * (8 if "8 x" in label else 1)))
            elapsed = srv.t_last - srv.t_first
            occ = srv.busy_slot_time / (slots * elapsed)
            print(
                f"   {label:50s}: occupancy {occ:.3f}, wall {elapsed:6.1f}s, total {time.perf_counter() - t0:6.1f}s"
            )
        finally:
            srv.stop()


def resume(records: int) -> None:
    print(f"3. resume from {records:,} existing records")
    with tempfile.TemporaryDirectory() as d:
        root = make_root(
            Path(d), records + 1000, {"base_url": "http://127.0.0.1:9/v1", "concurrency": 256}
        )
        out = root / "data" / "outputs" / "B1.jsonl"
        out.parent.mkdir(parents=True)
        # ~300 bytes of response text; real records are larger, the index reads the head only
        answer = "word " * 60
        with open(out, "wb") as f:
            for i in range(records):
                f.write(
                    encode_record(
                        {
                            "id": f"B1-{i:07d}",
                            "dataset": "B1",
                            "index": i,
                            "finish_reason": "stop",
                            "usage": {"prompt_tokens": 10, "completion_tokens": 1500},
                            "conversations": [
                                {"role": "user", "content": f"q{i}"},
                                {"role": "assistant", "content": answer},
                            ],
                            "model": "m",
                            "created": 1764500000,
                        }
                    )
                )
            f.write(b'{"id": "B1-torn", "dataset"')  # a crash mid-write
        size = out.stat().st_size
        job = JobSpec.load(root / "job.json")
        for label in ("first start (indexes built)", "restart (indexes in place)"):
            t0 = time.perf_counter()
            runner = Runner(Paths(root), job, Caps())
            runner.prepare()
            elapsed = time.perf_counter() - t0
            run = runner.stage.runs["B1"]
            assert len(run.done) == records and run.target_n == records + 1000
            print(
                f"   {label:34s}: {size / 1e6:.0f} MB of outputs repaired + indexed, {run.target_n:,} prompts: "
                f"{elapsed:.2f}s ({run.target_n - run.done_in_target:,} left to do)"
            )
            for r in runner.stage.runs.values():
                r.out.close()
                r.err.close()
                r.prompts.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--slots", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=3000)
    ap.add_argument("--token-time", type=float, default=0.0005)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--only", choices=["throughput", "occupancy", "resume"])
    a = ap.parse_args()
    if a.only in (None, "throughput"):
        throughput(a.latency, a.rounds)
    if a.only in (None, "occupancy"):
        occupancy(a.slots, a.prompts, a.token_time)
    if a.only in (None, "resume"):
        resume(a.records)


if __name__ == "__main__":
    main()
