"""What the released trainers make of our training files, by their own code: run with the Python of
the vLLM environment, with specforge 0.2.0 and speculators 0.9.0 on PYTHONPATH (no deps, in a folder
of their own: scripts/setup-trainers.sh; their data code's imports beside them). Writes
WORK_DIR/read.json (the trainers print to stdout themselves): each reader's rows as
`{"input_ids", "loss_mask"}`, in the order it gives them.

    python trainers_read.py TOKENIZER_DIR WORK_DIR

WORK_DIR holds the exports: specforge.jsonl (whole conversations), per_turn.jsonl (--per-turn) and
speculators.jsonl (pre-tokenized rows). The readers:
- SpecForge's dataset builder (`build_eagle3_dataset`, its ThinkingParser) on the conversations, with
  a registered thinking template whose markers are the tiny model's, and `train_only_last_turn` for
  the per-turn file, as docs/training-file.md tells users;
- SpecForge's prompt builder (`prepare_prompt_tasks`, `data.prompts_path`) on the pre-tokenized rows;
- `speculators prepare-data` on the pre-tokenized rows, then the Arrow dataset it saved;
- SpecForge's config schema on the run config of docs/training-file.md (`readme_config`).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

TEMPLATE = "deploytool-tiny-thinking"


def rows(dataset) -> list[dict]:
    out = []
    for r in dataset:
        ids, mask = r["input_ids"], r["loss_mask"]
        ids = ids.tolist() if hasattr(ids, "tolist") else ids
        mask = mask.tolist() if hasattr(mask, "tolist") else mask
        # SpecForge's builder keeps a batch axis of 1 per row
        ids = ids[0] if ids and isinstance(ids[0], list) else ids
        mask = mask[0] if mask and isinstance(mask[0], list) else mask
        out.append({"input_ids": ids, "loss_mask": mask})
    return out


def specforge_builder(tok, path: Path, last_only: bool) -> list[dict]:
    from datasets import load_dataset
    from specforge.data.preprocessing import build_eagle3_dataset

    raw = load_dataset("json", data_files=str(path), split="train")
    built = build_eagle3_dataset(
        raw,
        tok,
        chat_template=TEMPLATE,
        max_length=256,
        num_proc=1,
        train_only_last_turn=last_only,
    )
    return rows(built)


RECIPES = Path(__file__).resolve().parents[2] / "docs" / "training-file.md"


def readme_config() -> dict:
    """The docs' SpecForge run config (docs/training-file.md), as SpecForge 0.2.0's own schema
    validates it."""
    import yaml
    from specforge.config.schema import Config

    block = re.search(r"cat > run.yaml <<'YAML'\n(.*?)\nYAML\n", RECIPES.read_text(), re.S)
    cfg = Config.model_validate(yaml.safe_load(block.group(1)))
    return {"prompts_path": cfg.data.prompts_path, "mode": cfg.mode}


def main(tokenizer_dir: str, work: str) -> None:
    from datasets import load_from_disk
    from specforge.data.prompt_builder import prepare_prompt_tasks
    from specforge.data.template import TEMPLATE_REGISTRY, ChatTemplate
    from transformers import AutoTokenizer

    work_dir = Path(work)
    # the tiny model's template, as a user registers one (SpecForge's docs): Qwen3's markers, the
    # generation prompt opening the thinking, and no system prompt of SpecForge's own (it would add
    # one to every row without one: a context the target never saw)
    TEMPLATE_REGISTRY.register(
        TEMPLATE,
        ChatTemplate(
            assistant_header="<|im_start|>assistant\n<think>\n",
            user_header="<|im_start|>user\n",
            system_prompt=None,
            end_of_turn_token="<|im_end|>\n",
            parser_type="thinking",
            enable_thinking=True,
        ),
    )
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    out = {
        "specforge": specforge_builder(tok, work_dir / "specforge.jsonl", last_only=False),
        "specforge_per_turn": specforge_builder(tok, work_dir / "per_turn.jsonl", last_only=True),
    }
    tasks = prepare_prompt_tasks(
        str(work_dir / "speculators.jsonl"),
        tok,
        chat_template=None,
        max_length=256,
        is_preformatted=False,
        train_only_last_turn=False,
        cache_dir=None,
        cache_key=None,
        num_proc=1,
    )
    out["specforge_pretokenized"] = rows(t["payload"] for t in tasks)
    arrow = work_dir / "arrow"
    subprocess.run(  # its console script, as `-m`: the package is on PYTHONPATH, not in the venv
        [
            sys.executable,
            "-m",
            "speculators",
            "prepare-data",
            "--model",
            tokenizer_dir,
            "--data",
            str(work_dir / "speculators.jsonl"),
            "--output",
            str(arrow),
            "--seq-length",
            "256",
            "--num-preprocessing-workers",
            "1",
        ],
        check=True,
        stdout=sys.stderr,
    )
    out["speculators"] = rows(load_from_disk(str(arrow)))
    out["readme_config"] = readme_config()
    (work_dir / "read.json").write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
