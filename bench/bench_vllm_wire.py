"""Requests per prompt against a server that answers exactly as current vLLM (>= 0.16) does, with a share
of the answers cut by max_tokens inside their thinking (`content: null`, `reasoning`, finish `length`).

    .venv/bin/python bench/bench_vllm_wire.py [--prompts 160] [--cut 0.2] [--code DIR]

`--code DIR` runs the runner of another checkout (e.g. `git worktree add /tmp/old <commit>`) against the
same server, for a before/after figure. Retries back off from 10 ms instead of 1 s so a run takes
seconds; the number of requests does not depend on it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from common import REPO  # noqa: E402

from tests.conftest import runner_cmd
from tests.openai_server import FakeOpenAI


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", type=int, default=160)
    p.add_argument(
        "--cut", type=float, default=0.2, help="share of answers cut inside their thinking"
    )
    p.add_argument(
        "--code", type=Path, default=REPO, help="checkout whose `remote` runner to measure"
    )
    p.add_argument("--timeout", type=float, default=300)
    a = p.parse_args()
    srv = FakeOpenAI(shape="vllm", cut_in_thinking=a.cut, latency=0.005).start()
    try:
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            (root / "data" / "prompts").mkdir(parents=True)
            with open(root / "data" / "prompts" / "B8.jsonl", "w") as f:
                for i in range(a.prompts):
                    f.write(
                        json.dumps(
                            {
                                "id": f"B8-{i:06d}",
                                "messages": [{"role": "user", "content": f"q{i}"}],
                            }
                        )
                        + "\n"
                    )
            (root / "job.json").write_text(
                json.dumps(
                    {
                        "datasets": {
                            "B8": {"prompts": "data/prompts/B8.jsonl", "est_tokens": 8000}
                        },
                        "engine": {
                            "kind": "openai",
                            "base_url": srv.url,
                            "model": "moonshotai/Kimi-K2.5",
                            "concurrency": 32,
                            "retry_base": 0.01,
                            "max_retries": 8,
                        },
                        "sampling": {"max_tokens": 8192, "temperature": 1.0, "top_p": 0.95},
                        "chat_template_kwargs": {"thinking": True},
                    }
                )
            )
            t0 = time.perf_counter()
            try:
                res = subprocess.run(
                    runner_cmd(root),
                    cwd=a.code,
                    capture_output=True,
                    timeout=a.timeout,
                )
                code = res.returncode
            except subprocess.TimeoutExpired:
                code = "timeout"
            seconds = time.perf_counter() - t0
            out = root / "data" / "outputs"
            recs = (
                [json.loads(x) for x in (out / "B8.jsonl").read_text().splitlines()]
                if (out / "B8.jsonl").exists()
                else []
            )
            errs = (
                (out / "B8.errors.jsonl").read_text().splitlines()
                if (out / "B8.errors.jsonl").exists()
                else []
            )
            requests = sum(srv.attempts.values())
            cut = sum(1 for r in recs if r["finish_reason"] == "length")
            kept = sum(1 for r in recs if r["conversations"][-1].get("reasoning_content"))
            print(
                f"runner from {a.code} (exit {code}, {seconds:.1f}s): {a.prompts} prompts, {a.cut:.0%} cut inside "
                f"their thinking"
            )
            print(
                f"  requests {requests} = {requests / a.prompts:.2f} per prompt; most for one prompt "
                f"{max(srv.attempts.values())}"
            )
            print(
                f"  records {len(recs)} (finish=length {cut}, thinking kept in {kept}); errors-file lines {len(errs)}"
            )
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
