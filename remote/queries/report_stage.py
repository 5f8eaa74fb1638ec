"""The hidden-states stage's part of `invoke report`, per dataset: its rows, their tokens and bytes,
what was taken off the host, the rows' lengths and the stage's rate over its life. Read from each
ledger line's facts (what the check found and when the row counted): no token id is parsed."""

from __future__ import annotations

import collections
from pathlib import Path

from ..common.answers import ReportStage
from ..common.records import ROWS, RowLine, row_lines
from ..common.status import JobStatus
from ..job.hidden.store import read_freed


def scan_rows(folder: Path, made: collections.Counter) -> tuple[ReportStage, list[int]] | None:
    """The dataset's rows in its ledger up to the first line that is not whole (the stage reads it
    back to there too), and each row's length; `made` gets each row's tokens at the second it
    counted. None: the stage has no rows of it."""
    if not (folder / ROWS).exists():
        return None
    got, lengths = ReportStage(), []
    for row, raw in row_lines(folder / ROWS):
        got.trained += RowLine.trained(raw)
        got.rows += 1
        got.tokens += row.tokens
        got.bytes += row.bytes
        lengths.append(row.tokens)
        if got.layers is None:
            got.layers, got.hidden, got.dtype = row.layers, row.hidden, row.dtype
        if row.t is not None:
            made[int(row.t)] += row.tokens
    freed = {n: b for n, b in read_freed(folder).items() if n < got.rows}
    got.freed, got.freed_bytes = len(freed), sum(freed.values())
    return got, lengths


def stage_of(
    root: Path, names: list[str], st: JobStatus
) -> tuple[dict[str, tuple[ReportStage, list[int]]], collections.Counter]:
    """{dataset: (its rows, their lengths)} for the datasets the stage has rows of, and the tokens in
    rows made each second; the rows to make and the failed ones while the stage is the job's."""
    out, made = {}, collections.Counter()
    for name in names:
        scanned = scan_rows(root / name, made)
        if scanned is None:
            continue
        d = st.datasets.get(name) if st.stage_spec.makes_rows else None
        if d is not None:
            scanned[0].target, scanned[0].failed = d.target, d.errors
        out[name] = scanned
    return out, made
