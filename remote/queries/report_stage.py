"""The hidden-states stage's part of `invoke report`, per dataset: its rows, their tokens and bytes,
what was taken off the host, the rows' lengths and the stage's rate over its life. Read from each
line's tail (the facts the check found and when the row counted): no row's token ids are parsed."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from ..common.answers import ReportStage
from ..common.caps import HIDDEN_STATES
from ..common.status import JobStatus
from ..job.hidden.store import ROWS, read_freed

_TAIL = b'"seq_len":'
_MASK = b'"loss_mask":['


def scan_rows(folder: Path, made: collections.Counter) -> tuple[ReportStage, list[int]] | None:
    """The dataset's rows in its ledger up to the first line that is not whole (the stage reads it
    back to there too), and each row's length; `made` gets each row's tokens at the second it
    counted. None: the stage has no rows of it."""
    try:
        f = open(folder / ROWS, "rb")
    except FileNotFoundError:
        return None
    got, lengths = ReportStage(), []
    with f:
        for line in f:
            at = line.rfind(_TAIL)
            try:
                if not line.endswith(b"\n") or at < 0:
                    break
                tail = json.loads(b"{" + line[at:])
                n, size = int(tail["tokens"]), int(tail["bytes"])
            except (ValueError, KeyError, TypeError):
                break
            mask = line.find(_MASK)
            got.trained += line.count(b"1", mask, at) if mask >= 0 else 0  # the mask is 0s and 1s
            got.rows, got.tokens, got.bytes = got.rows + 1, got.tokens + n, got.bytes + size
            lengths.append(n)
            if got.layers is None:
                got.layers, got.hidden = int(tail["layers"]), int(tail["hidden"])
                got.dtype = str(tail["dtype"])
            if isinstance(tail.get("t"), int):
                made[tail["t"]] += n
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
        d = st.datasets.get(name) if st.stage == HIDDEN_STATES else None
        if d is not None:
            scanned[0].target, scanned[0].failed = d.target, d.errors
        out[name] = scanned
    return out, made
