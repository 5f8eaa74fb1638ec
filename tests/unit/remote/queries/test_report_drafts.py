"""The draft stage's results as report reads them from the host: each draft's folder, oldest first,
its measure per dataset; the held-out sets measured before (kept in before/) are not its measure."""

from __future__ import annotations

import json
import os

from remote.common.jobspec import Paths
from remote.common.status import DraftCounts
from remote.queries.report_drafts import drafts_measured


def folder(paths: Paths, tag: str, model: str, when: int, counts: dict[str, DraftCounts]) -> None:
    where = paths.drafts / tag
    (where / "before" / "old").mkdir(parents=True)
    (where / "draft.json").write_text(
        json.dumps({"model": model, "method": "eagle3", "num_speculative_tokens": 3})
    )
    os.utime(where / "draft.json", (when, when))
    for name, c in counts.items():
        (where / f"{name}.counts.json").write_text(
            json.dumps({"counts": c.to_dict(), "seconds": 2.0})
        )
        lines = [
            {"id": f"{name}-{i}", "usage": {"prompt_tokens": 1, "completion_tokens": 10}}
            for i in range(3)
        ]
        (where / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        (where / "before" / "old" / f"{name}.counts.json").write_text("{}")


def test_each_draft_folder_is_read_oldest_first_with_its_measure_per_dataset(tmp_path):
    paths = Paths(tmp_path)
    assert drafts_measured(paths) == []  # nothing measured: no folder at all
    folder(paths, "ours-2", "ours", 2_000, {"B1": DraftCounts(10, 30, 30, [10, 10, 10])})
    folder(paths, "public-1", "public", 1_000, {"B1": DraftCounts(20, 60, 20, [15, 5, 0])})
    got = drafts_measured(paths)
    assert [d.model for d in got] == ["public", "ours"]
    b1 = got[1].datasets["B1"]
    assert (b1.answered, b1.tokens, b1.seconds) == (3, 30, 2.0)
    assert (
        b1.counts.mean_acceptance_length == 4.0
        and got[0].datasets["B1"].counts.mean_acceptance_length == 2.0
    )
    assert list(got[0].datasets) == ["B1"]


def test_a_drafts_speed_is_the_tokens_kept_with_its_seconds(tmp_path):
    """Kept in one write with the seconds they were made in (an answer written after them, before a
    kill, is in neither); a release before kept none: its answers' tokens, as it read them."""
    paths = Paths(tmp_path)
    folder(paths, "ours-2", "ours", 2_000, {"B1": DraftCounts(10, 30, 30, [10, 10, 10])})
    counts = paths.drafts / "ours-2" / "B1.counts.json"
    assert drafts_measured(paths)[0].datasets["B1"].tokens == 30  # the older release's file
    counts.write_text(json.dumps(dict(json.loads(counts.read_text()), tokens=20)))
    b1 = drafts_measured(paths)[0].datasets["B1"]
    assert (b1.answered, b1.tokens, b1.seconds) == (3, 20, 2.0)
