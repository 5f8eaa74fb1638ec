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
    folders = (
        [f for f in paths.drafts.iterdir() if (f / "draft.json").is_file()]
        if paths.drafts.is_dir()
        else []
    )
    for folder in sorted(folders, key=lambda f: (f / "draft.json").stat().st_mtime):
        d = read_json(folder / "draft.json") or {}
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
                tokens=sum(answers.tokens.values()),
                seconds=kept.seconds,
            )
        found.append(got)
    return found
