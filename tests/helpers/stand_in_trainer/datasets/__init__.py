"""Stands in for Hugging Face `datasets` in the fast test tier, with only what
remote/job/train/prepare.py uses: `load_dataset("json", data_files=..., split="train",
cache_dir=...)`, `Dataset.set_format`, `Dataset.save_to_disk`, `len()` and iteration; and
`load_from_disk`, which the stand-in trainer reads with. A saved folder has the real one's
dataset_info.json and state.json beside its rows, kept as JSON lines in
`data-00000-of-00001.jsonl` (the real one writes Arrow)."""

from __future__ import annotations

import json
from pathlib import Path

ROWS = "data-00000-of-00001.jsonl"


class Dataset:
    def __init__(self, rows: list[dict]):
        self._rows = rows
        self.format = None

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self):
        return (dict(r) for r in self._rows)

    def __getitem__(self, i: int) -> dict:
        return dict(self._rows[i])

    @property
    def column_names(self) -> list[str]:
        return list(self._rows[0]) if self._rows else []

    def set_format(self, type=None, columns=None, **kwargs):  # noqa: A002 (the real one's name)
        self.format = type

    def save_to_disk(self, dataset_path) -> None:
        path = Path(dataset_path)
        path.mkdir(parents=True, exist_ok=True)
        with open(path / ROWS, "w") as f:
            for r in self._rows:
                f.write(json.dumps(r) + "\n")
        (path / "dataset_info.json").write_text(json.dumps({"features": self.column_names}))
        state = {"_data_files": [{"filename": ROWS}], "_format_type": self.format}
        (path / "state.json").write_text(json.dumps(state))


def load_dataset(path, data_files=None, split=None, cache_dir=None, **kwargs) -> Dataset:
    if path != "json" or split != "train" or not isinstance(data_files, str):
        raise ValueError("the stand-in datasets reads one JSON lines file as split 'train'")
    if cache_dir:  # the real one builds its Arrow cache there
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    with open(data_files) as f:
        return Dataset([json.loads(line) for line in f if line.strip()])


def load_from_disk(dataset_path) -> Dataset:
    path = Path(dataset_path)
    state = json.loads((path / "state.json").read_text())
    rows = Dataset([json.loads(x) for x in (path / ROWS).read_text().splitlines() if x])
    rows.format = state.get("_format_type")
    return rows
