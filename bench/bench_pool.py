"""One job over 1, 2, 4, 8 simulated continuous-batching servers, and one server of four killed mid-run.

    .venv/bin/python bench/bench_pool.py [--prompts 1200] [--slots 8] [--token-ms 0.25] [--counts 1,2,4,8]

Each server (tests/openai_server.py) has `slots` batch slots and spends `token-ms` per output token;
output lengths are long-tailed (lognormal, mean ~400 tokens, capped at 4096), the same for every run. The
runner keeps `concurrency = slots` in flight on each server, so any gap in refilling shows as idle slots.

1. makespan (first request in to last answer out, at the servers) and speed-up over one server;
   each server's slot occupancy while fed (from its first request to its last one arriving).
2. four servers as separate processes, one killed with SIGKILL mid-run: records missing, records
   duplicated, requests that went back to the queue.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import bench_runner
from common import REPO  # noqa: E402

from tests.conftest import runner_cmd
from tests.openai_server import FakeOpenAI


def make_root(root: Path, n: int, engine: dict) -> Path:
    return bench_runner.make_root(
        root, n, {"request_timeout": 120, **engine}, est_tokens=400, max_tokens=4096
    )


def lengths(key: str) -> int:
    rng = random.Random(key)
    sigma = 0.8
    return min(4096, max(8, int(rng.lognormvariate(math.log(400) - sigma * sigma / 2, sigma))))


def run_runner(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        runner_cmd(root),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )


def scale(prompts: int, slots: int, token_ms: float, counts: list[int]) -> None:
    print(
        f"1. {prompts} prompts, servers of {slots} slots at {token_ms} ms/token, concurrency {slots} per server"
    )
    base = None
    for n in counts:
        servers = []
        for _ in range(n):
            srv = FakeOpenAI(slots=slots, token_time=token_ms / 1000)
            srv.lengths = lengths
            servers.append(srv.start())
        try:
            with tempfile.TemporaryDirectory() as d:
                root = make_root(
                    Path(d), prompts, {"base_urls": [s.url for s in servers], "concurrency": slots}
                )
                res = run_runner(root)
                assert res.returncode == 0, res.stderr
                lines = (root / "data" / "outputs" / "B1.jsonl").read_text().splitlines()
            t0 = min(s.t_first for s in servers)
            t1 = max(s.t_last for s in servers)
            makespan = t1 - t0
            base = base or makespan
            occ = [s.occupancy(s.t_first, s.t_last_arrival) for s in servers]
            answered = [sum(s.requests.values()) for s in servers]
            print(
                f"   {n} server(s): makespan {makespan:6.2f}s  speed-up {base / makespan:4.2f}x "
                f"({base / makespan / n:.2f} of {n}x)  occupancy while fed min {min(occ):.3f} "
                f"mean {sum(occ) / n:.3f}  records {len(lines)}  answered per server {answered}"
            )
        finally:
            for s in servers:
                s.stop()


def kill_one(prompts: int) -> None:
    from tests.helpers.stand_ins import ServerProcess

    print(
        "2. four servers as processes (latency 0.3 s, concurrency 8 each), one killed with SIGKILL mid-run"
    )
    servers = [ServerProcess(latency=0.3).start() for _ in range(4)]
    try:
        with tempfile.TemporaryDirectory() as d:
            root = make_root(
                Path(d),
                prompts,
                {"base_urls": [s.url for s in servers], "concurrency": 8, "retry_base": 0.05},
            )
            proc = subprocess.Popen(
                runner_cmd(root),
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            out = root / "data" / "outputs" / "B1.jsonl"
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and (
                not out.exists() or len(out.read_text().splitlines()) < prompts // 3
            ):
                time.sleep(0.05)
            servers[2].proc.send_signal(signal.SIGKILL)
            killed_at = len(out.read_text().splitlines())
            proc.wait(600)
            ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
            log = (root / "logs" / "runner.log").read_text()
            requeued = [line for line in log.splitlines() if "unreachable" in line]
            st = json.loads((root / "run" / "status.json").read_text())
            print(
                f"   killed after {killed_at} records; runner exit {proc.returncode}, state {st['state']}"
            )
            print(
                f"   records {len(ids)} of {prompts}: missing {prompts - len(set(ids))}, duplicated "
                f"{len(ids) - len(set(ids))}; retries counted {st['retries']}"
            )
            print(
                f"   runner log: {requeued[0].split(' ', 2)[2] if requeued else 'no server marked down'}"
            )
    finally:
        for s in servers:
            s.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", type=int, default=1200)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--token-ms", type=float, default=0.25)
    p.add_argument("--counts", default="1,2,4,8")
    p.add_argument("--kill-prompts", type=int, default=400)
    a = p.parse_args()
    scale(a.prompts, a.slots, a.token_ms, [int(x) for x in a.counts.split(",")])
    kill_one(a.kill_prompts)


if __name__ == "__main__":
    main()
