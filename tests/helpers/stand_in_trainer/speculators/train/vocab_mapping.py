"""Stands in for speculators 0.9.0's `speculators.train.vocab_mapping` in the fast test tier: the
counts of the tokens that carry loss, as the real `save_token_frequency_distribution(dataset,
output_path)` makes them, written as JSON ({token id: count}) where the real one uses torch.save."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def save_token_frequency_distribution(dataset, output_path="./token_freq.pt"):
    path = Path(output_path)
    if path.exists():  # the real one reuses a file it finds, counting nothing
        return
    freq: Counter[int] = Counter()
    for item in dataset:
        freq.update(t for t, m in zip(item["input_ids"], item["loss_mask"]) if m)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({str(k): v for k, v in sorted(freq.items())}))
