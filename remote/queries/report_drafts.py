"""What the draft stage measured, as its files on the host keep it (data/draft/<tag>/: draft.json,
each dataset's answers and counts), for `report`'s page of the drafts side by side."""

from __future__ import annotations

from ..common.answers import DraftResult, ReportDraft
from ..common.codec import read_json
from ..common.jobspec import Paths
from ..common.status import DraftKept
from ..job.store.outputs import load_existing


def drafts_measured(paths: Paths) -> list[ReportDraft]:
    """Every draft measured on this host, oldest first (by its draft.json)."""
    found = []
    metas = [m for m in paths.drafts.glob("*/draft.json") if m.is_file()]
    for meta in sorted(metas, key=lambda m: m.stat().st_mtime):
        folder = meta.parent
        d = read_json(meta) or {}
        got = ReportDraft(
            tag=folder.name,
            model=str(d.get("model", "?")),
            method=str(d.get("method", "?")),
            num_speculative_tokens=int(d.get("num_speculative_tokens") or 0),
            baseline=bool(d.get("baseline")),
        )
        for counts in sorted(folder.glob("*.counts.json")):
            name = counts.name[: -len(".counts.json")]
            kept = DraftKept.read(counts) or DraftKept()
            answers = load_existing(folder / f"{name}.jsonl", update_index=False)
            got.datasets[name] = DraftResult(
                answered=len(answers.ids),
                counts=kept.counts,
                # its speed as kept (None: a release before this one kept its answers' tokens)
                tokens=sum(answers.tokens.values()) if kept.tokens is None else kept.tokens,
                seconds=kept.seconds,
            )
        found.append(got)
    return found
