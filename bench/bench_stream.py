"""Streamed vs plain requests: the runner's CPU per 1,000 tokens and the job's tokens/s.

    .venv/bin/python bench/bench_stream.py [--prompts 2000] [--concurrency 256] [--tokens 400]

The OpenAI test server (one process, in a thread here) answers every prompt with --tokens tokens after
holding one of --concurrency batch slots for tokens x --token-ms; streamed, it sends one chunk per
token, as vLLM does. The runner runs as its own process; its CPU (user + system) comes from
getrusage of the finished child. Both modes run twice, alternating.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import tempfile
import time
from pathlib import Path

from common import REPO  # noqa: E402

from tests.conftest import runner_cmd  # noqa: E402
from tests.openai_server import FakeOpenAI  # noqa: E402


def one_run(url: str, n: int, concurrency: int, stream: bool) -> dict:
    root = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    (root / "data" / "prompts").mkdir(parents=True)
    with open(root / "data" / "prompts" / "B1.jsonl", "w") as f:
        for i in range(n):
            msg = {"role": "user", "content": f"question {i}"}
            f.write(json.dumps({"id": f"B1-{i:06d}", "messages": [msg]}) + "\n")
    job = {
        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 400}},
        "engine": {
            "base_url": url,
            "model": "m",
            "concurrency": concurrency,
            "stream": stream,
            "metrics_interval": 0,
        },
        "sampling": {"max_tokens": 8192},
        "chat_template_kwargs": {"thinking": True},
    }
    (root / "job.json").write_text(json.dumps(job))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(runner_cmd(root), cwd=REPO, check=True, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    tokens = 0
    with open(root / "data" / "outputs" / "B1.jsonl") as f:
        for line in f:
            tokens += json.loads(line)["usage"]["completion_tokens"]
    return {"wall": wall, "cpu": cpu, "tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--token-ms", type=float, default=2.0)
    a = ap.parse_args()
    srv = FakeOpenAI(
        shape="vllm", tokens=a.tokens, slots=a.concurrency, token_time=a.token_ms / 1000
    ).start()
    srv.long_text = True  # n words for n tokens: one streamed chunk per token
    print(
        f"{a.prompts} prompts x {a.tokens} tokens, concurrency {a.concurrency}, "
        f"{a.token_ms} ms/token in the server"
    )
    try:
        for _ in range(2):
            for stream in (False, True):
                r = one_run(srv.url, a.prompts, a.concurrency, stream)
                print(
                    f"  {'streamed' if stream else 'plain   '}: {r['tokens'] / r['wall']:,.0f} tok/s "
                    f"(wall {r['wall']:.1f}s), runner CPU {r['cpu']:.1f}s = "
                    f"{1e6 * r['cpu'] / r['tokens']:.1f} ms per 1,000 tokens"
                )
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
