"""Telemetry's cost and history's size.

    .venv/bin/python bench/bench_telemetry.py [--prompts 1500] [--repeat 3]

1. The same job against the same continuous-batching test server (16 slots, long-tailed lengths), with
   the /metrics + nvidia-smi sampler on (every 1 s: ten times the default rate) and off
   (metrics_interval 0): makespan at the server, median of --repeat runs each, alternated.
2. run/history.jsonl for one simulated day (1,440 minute lines): 8 datasets, two of them moving at a
   time, 4 servers; and what 30 days make.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench_pool import lengths, make_root, run_runner
from common import REPO  # noqa: F401,E402

from remote.common.status import DatasetStatus, EndpointStatus, JobStatus
from remote.job.store.history import History
from tests.openai_server import FakeOpenAI


def makespan(prompts: int, interval: float) -> float:
    srv = FakeOpenAI(slots=16, token_time=0.0002)
    srv.lengths = lengths
    srv.start()
    try:
        with tempfile.TemporaryDirectory() as d:
            root = make_root(
                Path(d),
                prompts,
                {"base_url": srv.url, "concurrency": 16, "metrics_interval": interval},
            )
            res = run_runner(root)
            assert res.returncode == 0, res.stderr
        return srv.t_last - srv.t_first
    finally:
        srv.stop()


def history_day(path: Path) -> int:
    h = History(path)
    h.start(0, 1)
    names = [f"B{i}" for i in range(1, 9)]
    st = JobStatus(
        state="running",
        in_flight=1024,
        tokens_per_s=12345.6,
        endpoints=[EndpointStatus(url=f"http://gpu{i}:8000/v1") for i in range(4)],
        datasets={n: DatasetStatus(done=0, completion_tokens=0) for n in names},
    )
    for minute in range(1440):
        st.updated_at = 1_764_500_000 + 60 * minute
        moving = names[(minute // 180) % 8 : (minute // 180) % 8 + 2]
        for n in moving:
            st.datasets[n].done += 3
            st.datasets[n].completion_tokens += 12_000
        h.record(st)
    return path.stat().st_size


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--prompts", type=int, default=1500)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    on, off = [], []
    for _ in range(a.repeat):
        off.append(makespan(a.prompts, 0))
        on.append(makespan(a.prompts, 1.0))
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(
        f"1. {a.prompts} prompts, 16 slots: telemetry off {m_off:.2f}s, on (1 s interval) {m_on:.2f}s "
        f"-> {(m_on / m_off - 1) * 100:+.1f}% (runs off {[round(x, 2) for x in off]}, on {[round(x, 2) for x in on]})"
    )
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        size = history_day(Path(d) / "history.jsonl")
        took = time.perf_counter() - t0
    print(
        f"2. history.jsonl: {size / 1024:.0f} KiB per simulated day ({size / 1440:.0f} bytes a line), "
        f"~{size * 30 / (1 << 20):.1f} MiB for 30 days (written in {took * 1000:.0f} ms)"
    )


if __name__ == "__main__":
    main()
