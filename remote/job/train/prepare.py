"""The training data folder: every dataset's hidden-states rows as the one dataset speculators'
offline trainer reads, made once.

    <trainer python> -m remote.job.train.prepare PLAN.json
    PLAN.json: {"datasets": [{"name": "B1", "folder": "/abs/data/hidden_states/B1", "weight": 1}],
                "out": "/abs/run/train/data", "draft_vocab": null}

    out/rows.jsonl                       row i: n, id, dataset, source_n, input_ids, loss_mask, seq_len
    out/hidden_states/hs_<i>.safetensors  a hard link to the dataset's own file of that row
    out/data-*.arrow, dataset_info.json, state.json   the Arrow dataset (`save_to_disk`)
    out/token_freq.pt                    the reply tokens' counts, when the plan has a draft vocab
    out/lengths.json                     every row's seq_len, in order (the epochs' steps, see epoch_steps)
    out/manifest.json                    the inputs: digest, datasets, rows used and skipped

Rows go in the plan's order of datasets, each dataset's rows in its rows.jsonl order, numbered
0..N-1: first the training rows, a dataset's repeated `weight` times (a whole number >= 1), then
each dataset's held-out tail once (its last tenth, none of a dataset of one row), the validation
rows. The trainer splits at int(N * ratio): the stage passes `--train-data-ratio` as the manifest's
`train_ratio`, so the split falls exactly there and no copy of a trained row is validated on (a
weight never leaks into the best checkpoint's choice). A row is used when its file is there with
the size its line says; a freed row (its file pulled off the host with --free) or a missing or cut
file is skipped and counted.

Same data, same order: a resumed run must see exactly the rows it began with. `plan_digest(plan)`
sums the plan (each dataset's name, folder, weight, the draft vocab) and the rows it would use
((n, id, bytes) of each, in order) with the standard library alone, so the runner can compare it
with `out/manifest.json`'s digest without `datasets`. Prepare never changes a folder that exists:
the same digest is a no-op, another one is refused (exit 2). A changed input therefore needs a new
`out`, and with it a new save folder: the runner names both after the digest.

The folder is built in a hidden sibling (`.<out>.partial`, removed first if a killed prepare left
it) and renamed into place last: a kill -9 at any moment leaves no `out` or a whole one. Only
`main()` imports `datasets` (and speculators for the token counts): the trainer's Python has them,
the runner's need not."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ...common.records import ROWS, row_lines
from ..hidden.store import read_freed

MANIFEST = "manifest.json"
LENGTHS = "lengths.json"
MERGED = "rows.jsonl"
CACHE = (
    ".hf-cache"  # load_dataset's Arrow cache: inside the folder being made, gone before the rename
)


class PlanError(ValueError):
    """A plan that cannot be made (said in one line, exit 2)."""


@dataclass(frozen=True)
class SourceRow:
    """One line of a dataset's rows.jsonl, its tokens unread, and why it is skipped ("" if used)."""

    n: int
    id: str
    seq_len: int
    bytes: int
    shape: tuple[int, int, str]  # layers, hidden size, dtype of its file
    skip: str = ""  # "freed" (pulled off the host with --free) or "missing" (gone, or cut short)


def rows_of(folder: Path) -> list[SourceRow]:
    """A dataset folder's rows in order, up to the first line that is not a row's."""
    folder = Path(folder)
    freed = read_freed(folder)
    out = []
    for row, _raw in row_lines(folder / ROWS):
        path = folder / "hidden_states" / f"hs_{row.n}.safetensors"
        try:
            whole = path.stat().st_size == row.bytes
        except OSError:
            whole = False
        skip = "" if whole else "freed" if row.n in freed else "missing"
        shape = (row.layers, row.hidden, row.dtype)
        out.append(SourceRow(row.n, row.id, row.seq_len or row.tokens, row.bytes, shape, skip))
    return out


def _datasets(plan: dict) -> list[dict]:
    """The plan's datasets, checked: unique names, folders made absolute, whole weights >= 1."""
    found, names = [], set()
    for d in plan.get("datasets") or []:
        name, weight = str(d["name"]), d.get("weight", 1)
        if name in names:
            raise PlanError(f"dataset {name} is named twice in the plan")
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
            raise PlanError(f"dataset {name}: weight {weight!r} is not a whole number >= 1")
        names.add(name)
        found.append({"name": name, "folder": str(Path(d["folder"]).absolute()), "weight": weight})
    if not found:
        raise PlanError("the plan names no dataset")
    return found


def _snapshot(plan: dict) -> list[tuple[dict, list[SourceRow]]]:
    """Each dataset with its rows, all rows used of one shape (the trainer stacks them)."""
    sources = [(d, rows_of(Path(d["folder"]))) for d in _datasets(plan)]
    shapes = {(d["name"], r.shape) for d, rows in sources for r in rows if not r.skip}
    if len({s for _, s in shapes}) > 1:
        raise PlanError(f"the datasets' rows differ in (layers, hidden, dtype): {sorted(shapes)}")
    if not any(not r.skip for _, rows in sources for r in rows):
        raise PlanError("no row of the plan's datasets has its file here")
    return sources


def _digest(plan: dict, sources: list[tuple[dict, list[SourceRow]]]) -> str:
    h = hashlib.sha256(json.dumps({"v": 2, "draft_vocab": plan.get("draft_vocab")}).encode())
    for d, rows in sources:
        h.update(json.dumps([d["name"], d["folder"], d["weight"]]).encode())
        for r in rows:
            if not r.skip:
                h.update(json.dumps([r.n, r.id, r.bytes]).encode())
    return h.hexdigest()


def plan_digest(plan: dict) -> str:
    """What the plan's folder would be made of, summed (see the module's docstring)."""
    return _digest(plan, _snapshot(plan))


def read_manifest(out: Path) -> dict | None:
    try:
        return json.loads((Path(out) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def lengths(out: Path) -> list[int]:
    """Every row's seq_len in the folder's order (for epoch_steps.steps_per_epoch)."""
    return json.loads((Path(out) / LENGTHS).read_text())


def held_out(used: int) -> int:
    """A dataset's validation rows: its last tenth, at least one where it has two rows or more."""
    return 0 if used < 2 else max(1, round(used / 10))


def _parts(sources: list[tuple[dict, list[SourceRow]]]) -> list[tuple[dict, dict, int]]:
    """(dataset, {row n: its row} taken, copies): the training part first, then the held-out."""
    train, held = [], []
    for d, rows in sources:
        used = [r for r in rows if not r.skip]
        cut = len(used) - held_out(len(used))
        train.append((d, {r.n: r for r in used[:cut]}, d["weight"]))
        held.append((d, {r.n: r for r in used[cut:]}, 1))
    return train + held


def _merge(sources: list[tuple[dict, list[SourceRow]]], folder: Path) -> tuple[list[int], int]:
    """rows.jsonl and the hs_<i> links of every row used, in order; their seq_lens, and how many
    of them are training rows (the rest validate)."""
    (folder / "hidden_states").mkdir(parents=True)
    seq, trained = [], 0
    parts = _parts(sources)
    with open(folder / MERGED, "w") as f:
        for part_no, (d, want, copies) in enumerate(parts):
            if part_no == len(sources):
                trained = len(seq)
            src = Path(d["folder"])
            for _ in range(copies):
                for row, raw in row_lines(src / ROWS):
                    if row.n not in want:
                        continue
                    if row.id != want[row.n].id:
                        raise PlanError(f"{src / ROWS} changed while it was read: run it again")
                    full = json.loads(raw)
                    i = len(seq)
                    line = {"n": i, "id": row.id, "dataset": d["name"], "source_n": row.n}
                    line |= {k: full[k] for k in ("input_ids", "loss_mask", "seq_len")}
                    f.write(json.dumps(line, separators=(",", ":")) + "\n")
                    target = src / "hidden_states" / f"hs_{row.n}.safetensors"
                    _link(target, folder / "hidden_states" / f"hs_{i}.safetensors")
                    seq.append(int(full["seq_len"]))
    return seq, trained


def _link(target: Path, link: Path) -> None:
    """A hard link where it can be (`pull --hidden-states --free` deleting the dataset's file then
    leaves the trainer's), else a symbolic one (another filesystem)."""
    try:
        os.link(target, link)
    except OSError:
        os.symlink(target, link)


def train_ratio(trained: int, n: int) -> float:
    """The trainer's --train-data-ratio that splits `n` rows exactly after the first `trained`
    (it takes int(n * ratio))."""
    return (trained + 0.5) / n if n else 0.9


def _manifest(plan: dict, sources, digest: str, n: int) -> dict:
    sets = []
    for d, rows in sources:
        used = sum(1 for r in rows if not r.skip)
        skipped = {k: sum(1 for r in rows if r.skip == k) for k in ("freed", "missing")}
        sets.append({**d, "rows": used, "used": used * d["weight"], "skipped": skipped})
    shape = next(r.shape for _, rows in sources for r in rows if not r.skip)
    return {"digest": digest, "rows": n, "datasets": sets, "shape": list(shape),
            "draft_vocab": plan.get("draft_vocab"), "made": int(time.time())}  # fmt: skip


def _convert(folder: Path, draft_vocab: int | None) -> None:
    """The docs' conversion, in the trainer's Python; the token counts from speculators itself."""
    from datasets import load_dataset

    rows = load_dataset(
        "json", data_files=str(folder / MERGED), split="train", cache_dir=str(folder / CACHE)
    )
    rows.set_format(type="torch")
    rows.save_to_disk(str(folder))
    if draft_vocab is not None:
        from speculators.train.vocab_mapping import save_token_frequency_distribution

        save_token_frequency_distribution(rows, folder / "token_freq.pt")
    del rows
    shutil.rmtree(folder / CACHE, ignore_errors=True)


def _summary(manifest: dict, out: Path, made: bool) -> str:
    keep = ("name", "weight", "rows", "used", "skipped")
    sets = [{k: d[k] for k in keep} for d in manifest["datasets"]]
    return json.dumps({"out": str(out), "digest": manifest["digest"], "rows": manifest["rows"],
                       "made": made, "datasets": sets})  # fmt: skip


def prepare(plan: dict) -> tuple[dict, bool]:
    """Make the plan's folder (or find it made): its manifest, and whether it was made now."""
    out = Path(plan["out"]).absolute()
    sources = _snapshot(plan)
    digest = _digest(plan, sources)
    if out.exists() or out.is_symlink():
        have = read_manifest(out)
        if have is not None and have.get("digest") == digest:
            return have, False
        raise PlanError(f"{out} holds other inputs than the plan's: give a new folder")
    part = out.with_name(f".{out.name}.partial")
    if part.exists() or part.is_symlink():
        shutil.rmtree(part)  # a prepare killed before its rename
    part.mkdir(parents=True)
    seq, trained = _merge(sources, part)
    _convert(part, plan.get("draft_vocab"))
    (part / LENGTHS).write_text(json.dumps(seq))
    manifest = _manifest(plan, sources, digest, len(seq))
    manifest["train_rows"] = trained
    manifest["train_ratio"] = train_ratio(trained, len(seq))
    (part / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    os.rename(part, out)
    return manifest, True


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m remote.job.train.prepare PLAN.json", file=sys.stderr)
        return 2
    plan = json.loads(Path(args[0]).read_text())
    try:
        manifest, made = prepare(plan)
    except (PlanError, KeyError) as e:
        print(json.dumps({"error": str(e) if isinstance(e, PlanError) else f"plan lacks {e}"}))
        return 2
    print(_summary(manifest, Path(plan["out"]).absolute(), made), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
