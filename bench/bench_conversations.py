"""Batch slots busy while the window is fed with whole conversations (`turns: all`).

    .venv/bin/python bench/bench_conversations.py [--slots 32] [--conversations 300]

The test server models continuous batching (S slots, a per-token time, lognormal answer lengths).
The same number of requests is sent twice: as one-turn prompts, and as 3-turn conversations whose
turn k+1 can only be asked once turn k is answered. The window must not drain between turns: a
conversation's next turn is sent the moment its previous one is answered, on the same server.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from bench_runner import lognormal_lengths, make_root, run_runner

from tests.openai_server import FakeOpenAI


def write_conversations(path: Path, n: int, turns: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            msgs = []
            for k in range(turns):
                msgs += [
                    {"role": "user", "content": f"conversation {i} turn {k}"},
                    {"role": "assistant", "content": "the original answer"},
                ]
            f.write(json.dumps({"id": f"B1-{i:07d}", "messages": msgs}) + "\n")


def one(slots: int, token_time: float, n: int, turns: int) -> tuple[float, float, int]:
    srv = FakeOpenAI(slots=slots, token_time=token_time).start()
    srv.lengths = lognormal_lengths(300)
    try:
        with tempfile.TemporaryDirectory() as d:
            requests = n * turns
            root = make_root(Path(d), requests, {"base_url": srv.url, "concurrency": 2 * slots})
            if turns > 1:
                write_conversations(root / "data" / "prompts" / "B1.jsonl", n, turns)
                job = json.loads((root / "job.json").read_text())
                job["datasets"]["B1"]["turns"] = "all"
                (root / "job.json").write_text(json.dumps(job))
            t0 = time.perf_counter()
            run_runner(root)
            wall = time.perf_counter() - t0
        elapsed = srv.t_last - srv.t_first
        return srv.busy_slot_time / (slots * elapsed), wall, len(srv.bodies)
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--conversations", type=int, default=300)
    ap.add_argument("--token-time", type=float, default=0.0005)
    a = ap.parse_args()
    n = a.conversations
    print(
        f"{a.slots} batch slots, lognormal lengths (mean 300), {a.token_time * 1000:.1f} ms/token, "
        f"runner concurrency {2 * a.slots}"
    )
    for label, convs, turns in (
        (f"{3 * n} one-turn prompts", 3 * n, 1),
        (f"{n} conversations of 3 turns", n, 3),
    ):
        occ, wall, sent = one(a.slots, a.token_time, convs, turns)
        print(f"   {label:32s}: occupancy {occ:.3f}, {sent} requests, wall {wall:5.1f}s")


if __name__ == "__main__":
    main()
