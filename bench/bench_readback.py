"""What the host reads back of its own logs as a runner starts and as `report` runs: a hidden-states
ledger (a dataset's rows.jsonl: the stage's read-back, `HiddenStore.open`, and the report's scan,
`scan_rows`; a row's line is nearly all token ids, and these readers need the few fields either
side of them), and a 30-day job's run/history.jsonl (`history.active`, read by each runner start
for the job's rate).

    .venv/bin/python bench/bench_readback.py [--rows 20000] [--tokens 3000] [--repeat 3]

Prints the median seconds of each over --repeat runs, the ledger's size, and this process's peak
memory once the read-backs are done (what a runner starting on the ledger holds at most).
"""

from __future__ import annotations

import argparse
import collections
import resource
import shutil
import tempfile
from pathlib import Path

from common import timed  # noqa: E402  (puts the repository on the path)

from remote.common.records import ROWS, RowLine  # noqa: E402
from remote.common.status import DatasetStatus, JobStatus  # noqa: E402
from remote.job.hidden.store import HiddenStore  # noqa: E402
from remote.job.store import history  # noqa: E402
from remote.queries.report_stage import scan_rows  # noqa: E402


def make_ledger(root: Path, rows: int, tokens: int) -> None:
    """`rows` lines laid out as the stage writes them, each with its (small) hs_<n> file."""
    files = root / "B1" / "hidden_states"
    files.mkdir(parents=True)
    prompt = tokens // 4
    ids = list(range(1000, 1000 + tokens))
    mask = [0] * prompt + [1] * (tokens - prompt)
    with open(root / "B1" / ROWS, "wb") as f:
        for n in range(rows):
            (files / f"hs_{n}.safetensors").write_bytes(b"\0" * 16)
            line = RowLine(n=n, id=f"B1-{n}_gen0", record=f"B1-{n}", input_ids=ids, loss_mask=mask,
                           seq_len=tokens, tokens=tokens, layers=4, hidden=4096, dtype="BF16",
                           bytes=16, t=1_700_000_000 + n)  # fmt: skip
            f.write(line.line())


def make_history(path: Path, days: int = 30) -> None:
    """A line a minute for `days` days of eight datasets, as the runner writes them."""
    h = history.History(path)
    h.start(0, 1)
    for i in range(days * 24 * 60):
        st = JobStatus(state="running", updated_at=60.0 * i, tokens_per_s=1234.5, in_flight=64)
        st.datasets = {
            f"B{d}": DatasetStatus(done=i * d, completion_tokens=i * d * 500) for d in range(1, 9)
        }
        h.record(st)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--tokens", type=int, default=3_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ledger-"))
    try:
        make_ledger(root, a.rows, a.tokens)
        size = (root / "B1" / "rows.jsonl").stat().st_size

        def read_back():
            store = HiddenStore(root, "B1", log=lambda *_: None).open()
            assert store.count == a.rows
            store.close()

        def report():
            got, _ = scan_rows(root / "B1", collections.Counter())
            assert got.rows == a.rows

        print(f"ledger: {a.rows:,} rows of {a.tokens:,} tokens, {size / (1 << 20):,.0f} MiB")
        print(f"stage read-back (HiddenStore.open): {timed(read_back, a.repeat)[0]:.2f} s")
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak memory after the read-back:    {peak:,.0f} MiB")
        print(f"report scan (scan_rows):            {timed(report, a.repeat)[0]:.2f} s")
        make_history(root / "history.jsonl")
        rate = timed(lambda: history.active(root / "history.jsonl"), a.repeat)[0]
        print(f"30 days of history (history.active): {rate:.2f} s")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
