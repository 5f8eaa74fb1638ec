"""What speculators 0.9.0's offline trainer makes of the stage's files, by its own code: run with the
Python of the vLLM environment. In WORK_DIR, `pulled/gpu1/hidden_states/B1` is a dataset's folder of the host's
data/hidden_states/; the docs' own conversion (docs/hidden-states.md) is run on it as written, then
speculators' ArrowDataset reads every row with its file and `check_hidden_states` checks each file.
Writes WORK_DIR/read.json: each row as the trainer gives it.

    python hidden_read.py WORK_DIR
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "hidden-states.md"


def main(work: str) -> None:
    from safetensors.torch import load_file
    from speculators.data_generation.offline import check_hidden_states
    from speculators.train.data import ArrowDataset

    os.chdir(work)
    block = re.search(r"python - <<'PY'\n(.*?)\nPY\n", DOCS.read_text(), re.S).group(1)
    exec(compile(block, str(DOCS), "exec"), {})  # the docs' conversion, as a user runs it
    d = Path("pulled/gpu1/hidden_states/B1")
    ds = ArrowDataset(max_len=1 << 16, datapath=str(d), on_missing="raise")
    out = []
    for i in range(len(ds)):
        item = ds[i]
        row = ds.data[i]
        check_hidden_states(
            load_file(str(d / "hidden_states" / f"hs_{i}.safetensors")), row["input_ids"].tolist()
        )
        out.append(
            {
                "input_ids": item["input_ids"].tolist(),
                "loss_mask": row["loss_mask"].tolist(),
                "hidden_states": list(item["hidden_states"].shape),
                "verifier_last_hidden_states": list(item["verifier_last_hidden_states"].shape),
            }
        )
    Path("read.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
