"""Which rows the hidden-states stage makes of one dataset: each reply of each record the job kept,
in the file's order, as the exact tokens the target saw and wrote (from the record: nothing is
tokenised again), for the records among the dataset's first N prompts (its cap)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ...common.caps import Target
from ...common.records import Record, TokenRow


@dataclass
class Rows:
    rows: list[TokenRow] = field(default_factory=list)
    untokened: int = 0  # records kept without token ids (return_token_ids was off)


def rows_of(outputs: Path, target: Target) -> Rows:
    """The rows of the records in `outputs` that `target` holds;
    a record id seen twice counts once (its first record, as the generation resumes)."""
    got, seen = Rows(), set()
    try:
        f = open(outputs, "rb")
    except FileNotFoundError:
        return got
    with f:
        for raw in f:
            try:
                rec = Record.from_json(json.loads(raw))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a torn last line the generation repairs
            if rec.id in seen:
                continue
            seen.add(rec.id)
            if not target.holds(rec.id, rec.index):
                continue
            rows = rec.token_rows()
            if not rows:
                got.untokened += 1
            got.rows.extend(rows)
    return got
