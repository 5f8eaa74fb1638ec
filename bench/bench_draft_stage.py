"""The draft stage's own cost: the runner's CPU per request when it asks held-out prompts and samples
the server's speculative-decoding counters each second, against the answers' stage on as many
prompts (the same runner, the same OpenAI test server, which counts drafts as vLLM does).

    .venv/bin/python bench/bench_draft_stage.py [--prompts 2000] [--concurrency 64] [--repeat 3]

Prints, per stage, the runner's CPU seconds (user + system, its whole process from start to exit)
and its CPU milliseconds per request, the median of the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench_runner import make_root
from common import REPO  # noqa: E402

from remote.common.caps import Caps
from remote.common.jobspec import Paths, ServerSpec
from remote.common.state import ServerWanted, Supervise
from tests.conftest import runner_cmd
from tests.openai_server import FakeOpenAI

DRAFT = {"model": "org/d", "method": "eagle3", "num_speculative_tokens": 3}


def cpu_of(cmd: list[str]) -> float:
    """The CPU seconds (user + system) the command's process took, from start to exit."""
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"{cmd} failed"
    return usage.ru_utime + usage.ru_stime


def one(stage: str, prompts: int, concurrency: int) -> float:
    srv = FakeOpenAI(tokens=20, spec_decode=(3, {"q": 2})).start()
    try:
        with tempfile.TemporaryDirectory() as d:
            root = make_root(
                Path(d), 2 * prompts, {"base_url": srv.url, "concurrency": concurrency}
            )
            paths = Paths(root)
            paths.ensure()
            if stage == "draft":  # the held-out prompts: those after a cap of `prompts`
                spec = ServerSpec(draft=dict(DRAFT, eval_samples=prompts))
                Supervise(server=ServerWanted(wanted=True, spec=spec)).write(paths.supervise)
            Caps(max_samples=prompts, stage=stage).write(paths.caps)
            t0 = time.perf_counter()
            cpu = cpu_of(runner_cmd(root, "--stage", stage))
            wall = time.perf_counter() - t0
            out = (
                paths.output("B1") if stage == "generate" else next(paths.drafts.glob("*/B1.jsonl"))
            )
            made = len(out.read_text().splitlines())
            assert made == prompts, f"{stage}: {made} answers, not {prompts}"
            print(
                f"  {stage:9s} {cpu:6.2f} s CPU, {1000 * cpu / prompts:5.2f} ms a request ({wall:.1f} s wall)"
            )
            return cpu
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(
        f"runner CPU for {a.prompts} requests at concurrency {a.concurrency}, {a.repeat} runs each"
    )
    got = {
        s: [one(s, a.prompts, a.concurrency) for _ in range(a.repeat)]
        for s in ("generate", "draft")
    }
    for stage, runs in got.items():
        cpu = statistics.median(runs)
        print(f"{stage}: median {cpu:.2f} s CPU, {1000 * cpu / a.prompts:.2f} ms a request")


if __name__ == "__main__":
    main()
