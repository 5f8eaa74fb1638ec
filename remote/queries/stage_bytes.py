"""What the hidden-states stage will write at a plan's caps, beside the disk's free space: the tokens
of its rows (a record's prompt and reply ids, every reply), times the bytes a token takes (the rows'
own once some are made, else the model's layers kept × hidden size × bytes per value)."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

from ..common import machine
from ..common.answers import StageBytes
from ..common.caps import Target
from ..common.jobspec import Paths, ServerSpec
from ..common.records import ROWS, Record, row_lines
from ..job.store.outputs import load_existing

SAMPLE = 1000  # lines read per file for a mean: plan answers at once on a job of millions
DEFAULT_LAYERS = 4  # speculators' default [2, L/2, L-3, L]


def mean_row_tokens(path: Path) -> tuple[float | None, int, int]:
    """The mean tokens of a record's rows over its file's first records, how many of them had
    token ids (the stage leaves the others out), and how many were read."""
    tokens = with_ids = read = 0
    try:
        with open(path, encoding="utf-8") as f:
            for line in itertools.islice(f, SAMPLE):
                try:
                    rows = Record.from_json(json.loads(line)).token_rows()
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue  # a torn last line
                read += 1
                if rows:
                    with_ids += 1
                    tokens += sum(len(r.input_ids) for r in rows)
    except OSError:
        return None, 0, 0
    return (tokens / with_ids if with_ids else None), with_ids, read


def measured_per_token(paths: Paths) -> float | None:
    """Bytes a token takes in the rows already made (each rows.jsonl line says both)."""
    size = tokens = 0
    for ledger in sorted(paths.hidden_states.glob(f"*/{ROWS}")):
        for row, _ in itertools.islice(row_lines(ledger), SAMPLE):
            size, tokens = size + row.bytes, tokens + row.tokens
    return size / tokens if tokens else None


def per_token(paths: Paths, spec: ServerSpec, simulated: bool) -> tuple[float | None, str]:
    measured = measured_per_token(paths)
    if measured:
        return measured, "measured on the rows made"
    if simulated:  # the server's model is not what makes the rows: nothing to read
        return None, "not known until the stage makes its first row (the simulated engine's)"
    cfg = machine.model_config(spec.model)
    layers = len(spec.hidden_states.get("layers") or ()) or DEFAULT_LAYERS
    if cfg["hidden"] and cfg["dtype_bytes"]:
        return (
            float(layers * cfg["hidden"] * cfg["dtype_bytes"]),
            f"{layers} layers × {cfg['hidden']:,} × {cfg['dtype_bytes']} B, the model's config.json",
        )
    why = (
        ""
        if spec.model == ServerSpec.model
        else f" ({spec.model}'s config.json is not on the host)"
    )
    return None, f"not known until the stage makes its first row{why}"


def stage_bytes(
    paths: Paths, spec: ServerSpec, targets: dict[str, Target], simulated: bool = False
) -> StageBytes:
    """The stage at `targets` (each dataset's records): its row tokens, what is made, the bytes.
    The rows made are read from the stage's own ledgers, whatever stage the job is in now: a
    record with rows counts its rows' tokens, one without the first records' mean."""
    tokens = made = sampled = 0
    for ds, target in targets.items():
        mean, with_ids, read = mean_row_tokens(paths.output(ds))
        sampled += with_ids
        have, left = _made_and_left(paths, ds, target, with_ids / read if read else 1.0)
        tokens, made = tokens + have + int((mean or 0) * left), made + have
    bpt, basis = per_token(paths, spec, simulated)
    try:
        free = shutil.disk_usage(paths.root).free
    except OSError:
        free = None
    return StageBytes(
        tokens=tokens, made=made, bytes_per_token=bpt, basis=basis, free=free, sampled=sampled
    )


def _made_and_left(paths: Paths, ds: str, target: Target, share: float) -> tuple[int, float]:
    """The tokens of the rows made of the target's records, and how many of its records are left
    to make rows of: those not made yet, and those made with no rows, at the `share` of records
    that carry token ids (the stage leaves the others out: never counted as left)."""
    rows = [
        row
        for row, _ in row_lines(paths.hidden_states / ds / ROWS)
        if target.ids is None or row.record in target.ids
    ]
    with_rows = {row.record for row in rows}
    have = sum(row.tokens for row in rows)
    if target.ids is None:  # no prompt file to read: the cap alone
        return have, max(0, (target.n or 0) - len(with_rows))
    recorded = load_existing(paths.output(ds), update_index=False).ids
    unmade = len(target.ids - recorded)
    no_rows = len((target.ids & recorded) - with_rows)
    return have, unmade + no_rows * share
