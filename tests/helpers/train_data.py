"""Hidden-states dataset folders as the hidden-states stage leaves them on the host, the train
stage's data folder made from them, and the stand-in trainer (tests/helpers/stand_in_trainer) as a
process: shared by the train stage's tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from remote.common.records import ROWS, RowLine
from remote.job.hidden import hsfile
from remote.job.hidden.store import FREED, Freed
from tests.conftest import REPO

STAND_IN = Path(__file__).resolve().parent / "stand_in_trainer"


def write_dataset(
    root: Path, name: str, n: int, *, freed=(), missing=(), layers: int = 3, dtype: str = "BF16"
) -> Path:
    """<root>/<name>/rows.jsonl and hidden_states/hs_<i>.safetensors (real safetensors files of
    zeros, [tokens, layers, 4]); rows in `freed` are in freed.jsonl without their file, rows in
    `missing` lack theirs."""
    folder = root / name
    (folder / "hidden_states").mkdir(parents=True)
    with open(folder / ROWS, "wb") as f, open(folder / FREED, "wb") as fr:
        for i in range(n):
            ids = [100 + i, 7, 8 + i % 3, 9]
            path = folder / "hidden_states" / f"hs_{i}.safetensors"
            hsfile.write(
                path, ids, bytes(len(ids) * layers * 4 * hsfile.dtype_bytes(dtype)), layers, dtype
            )
            size = path.stat().st_size
            line = RowLine(n=i, id=f"{name}-{i:06d}_gen0", record=f"{name}-{i:06d}", turn=0,
                           input_ids=ids, loss_mask=[0, 1, 1, 1], seq_len=len(ids), tokens=len(ids),
                           layers=layers, hidden=4, dtype=dtype, bytes=size, t=1.0)  # fmt: skip
            f.write(line.line())
            if i in freed:
                fr.write(Freed(i, size, "0" * 64).line())
            if i in freed or i in missing:
                path.unlink()
    return folder


def plan(out: Path, *sets: tuple[Path, int], draft_vocab: int | None = None) -> dict:
    return {
        "datasets": [{"name": f.name, "folder": str(f), "weight": w} for f, w in sets],
        "out": str(out),
        "draft_vocab": draft_vocab,
    }


def env(**extra: str) -> dict:
    """The stand-ins first on the path (the trainer's Python), then the repository (prepare)."""
    path = os.pathsep.join([str(STAND_IN), str(REPO)])
    # a row a step: these tests count steps by rows (the stage's own test packs them as the real one)
    one = {"STAND_IN_TRAINER_ROWS_PER_STEP": "1"}
    return {**os.environ, "PYTHONPATH": path, "COLUMNS": "2000", **one, **extra}


def run_prepare(tmp: Path, the_plan: dict) -> subprocess.CompletedProcess:
    where = tmp / "plan.json"
    where.write_text(json.dumps(the_plan))
    return subprocess.run(
        [sys.executable, "-m", "remote.job.train.prepare", str(where)],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def trainer_args(data: Path, save: Path, epochs: int = 2, freq: float = 0.5) -> list[str]:
    return [
        "--verifier-name-or-path", "/models/target", "--data-path", str(data),
        "--save-path", str(save), "--target-layer-ids", "0", "1", "--epochs", str(epochs),
        "--checkpoint-freq", str(freq), "--on-missing", "raise", "--some-new-flag", "x",
    ]  # fmt: skip


def start_trainer(args: list[str], **extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "speculators.train", *args],
        cwd=REPO,
        env=env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_trainer(args: list[str], **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "speculators.train", *args],
        cwd=REPO,
        env=env(**extra),
        capture_output=True,
        text=True,
        timeout=60,
    )


def stand_in_wheel(folder: Path) -> Path:
    """The stand-ins as a wheel (speculators' trainer and datasets, standard library only): what
    pip installs with no index, so the host's own install of job.train.trainer runs for real."""
    info = "stand_in_trainer-0.1.dist-info"
    wheel = folder / "stand_in_trainer-0.1-py3-none-any.whl"
    files = sorted(p for p in STAND_IN.rglob("*.py") if "__pycache__" not in p.parts)
    with zipfile.ZipFile(wheel, "w") as z:
        for p in files:
            z.write(p, p.relative_to(STAND_IN).as_posix())
        z.writestr(
            f"{info}/METADATA", "Metadata-Version: 2.1\nName: stand-in-trainer\nVersion: 0.1\n"
        )
        z.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        record = [f"{p.relative_to(STAND_IN).as_posix()},," for p in files]
        z.writestr(
            f"{info}/RECORD",
            "\n".join([*record, f"{info}/METADATA,,", f"{info}/WHEEL,,", f"{info}/RECORD,,"])
            + "\n",
        )
    return wheel
