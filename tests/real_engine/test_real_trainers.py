"""The trainers read our files as we mean them, proven by their own released code: records made by
real vLLM (the tiny model's trainer variant: a template that keeps each reply's thinking), exported by
`invoke export`'s code, then read by SpecForge 0.2.0's dataset builder and prompt builder and by
`speculators prepare-data` 0.9.0 (tests/real_engine/trainers_read.py, in the vLLM environment).

Only tokens the target model generated carry loss: every row each trainer made is compared, token for
token, with the records' own token ids (the prompt's and each reply's, as vLLM returned them)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from deploytool.ops.export import Source, effective_drop, export
from deploytool.ops.formats import replies
from remote.common.records import Record
from tests.conftest import REPO, free_port, outputs, records, runner_cmd, write_prompts
from tests.helpers.conversations import ORIGINAL, write_conversations
from tests.real_engine import rig

pytestmark = pytest.mark.real_vllm

TOOL_CALL = [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]


def write_datasets(data: Path) -> dict:
    write_prompts(data / "B1.jsonl", 10, "B1")
    with open(data / "SY.jsonl", "w") as f:  # a system prompt; the last one after the user turn
        for i in range(6):
            msgs = [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": f"q {i}"},
            ]
            if i == 5:
                msgs.append({"role": "system", "content": "answer in one word"})
            f.write(json.dumps({"id": f"SY-{i:06d}", "messages": msgs}) + "\n")
    write_conversations(data / "MT.jsonl", 6)  # turns: all: every reply the target's
    write_conversations(data / "HL.jsonl", 5, ds="HL")  # turns: last: the history is the dataset's
    tool = [
        {"role": "user", "content": "add two and three"},
        {"role": "assistant", "content": "", "tool_calls": TOOL_CALL},
        {"role": "tool", "tool_call_id": "call_1", "name": "add", "content": "5"},
        {"role": "user", "content": "so ?"},
    ]
    with open(data / "HL.jsonl", "a") as f:
        f.write(json.dumps({"id": "HL-000005", "messages": tool}) + "\n")
    return {
        ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 30, "turns": turns}
        for ds, turns in (("B1", "last"), ("SY", "last"), ("MT", "all"), ("HL", "last"))
    }


def run_job(root: Path, url: str, datasets: dict, max_tokens: int) -> None:
    spec = {
        "datasets": datasets,
        "engine": {"kind": "openai", "base_url": url, "model": rig.SERVED_NAME, "concurrency": 8},
        # greedy: the trainer variant thinks 8 words, closes the thinking, answers 12 and ends
        "sampling": {"max_tokens": max_tokens, "temperature": 0},
        "extra_body": {"return_token_ids": True},
    }
    (root / "job.json").write_text(json.dumps(spec))
    res = subprocess.run(runner_cmd(root), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]


def expected(rec: dict, k: int | None) -> tuple:
    """The row a trainer should make: the tokens vLLM saw and made, loss on each reply's own tokens
    (k: only reply k, with its prompt; None: the whole conversation, every reply)."""
    made = [g for _, g in replies(Record.from_json(rec))]
    if k is not None:
        g = made[k]
        return tuple(g.prompt_token_ids + g.token_ids), tuple(
            [0] * len(g.prompt_token_ids) + [1] * len(g.token_ids)
        )
    ids = made[-1].prompt_token_ids + made[-1].token_ids
    mask = [0] * len(ids)
    for g in made:  # each turn's prompt holds the replies before it, rendered as they were made
        start = len(g.prompt_token_ids)
        assert ids[start : start + len(g.token_ids)] == g.token_ids
        mask[start : start + len(g.token_ids)] = [1] * len(g.token_ids)
    return tuple(ids), tuple(mask)


def made(rows: list[dict]) -> list[tuple]:
    return sorted((tuple(r["input_ids"]), tuple(r["loss_mask"])) for r in rows)


@pytest.mark.timeout(900)
def test_specforge_and_speculators_train_exactly_the_generated_tokens(
    tmp_path, vllm_exe, vllm_python
):
    model = rig.build_model(tmp_path / "model", vllm_python, trainer=True)
    main, cut = tmp_path / "main", tmp_path / "cut"
    datasets = write_datasets(main / "data" / "prompts")
    write_prompts(cut / "data" / "prompts" / "CUT.jsonl", 4, "CUT")
    with rig.serve(vllm_exe, model, free_port(), tmp_path / "vllm.log") as url:
        run_job(main, url, datasets, max_tokens=48)
        # a few tokens: every reply cut inside its thinking (no answer text)
        run_job(cut, url, {"CUT": {"prompts": "data/prompts/CUT.jsonl", "est_tokens": 4}}, 4)

    recs = {ds: records(main, ds) for ds in datasets}
    by_id = {r["id"]: r for rs in recs.values() for r in rs}
    assert all(r["finish_reason"] == "stop" for r in by_id.values())  # each reply ended itself
    assert all(t["token_ids"] for r in recs["MT"] for t in r["turns"])
    sources = [Source("h", ds, outputs(main) / f"{ds}.jsonl", {"model": "tiny"}) for ds in datasets]
    work = tmp_path / "work"
    work.mkdir()  # export makes no folder (an --out into a missing one is refused)
    whole = export(sources, work / "specforge.jsonl", fmt="specforge", per_turn=False)
    per_turn = export(sources, work / "per_turn.jsonl", fmt="specforge", per_turn=True)
    # the default: HL holds the dataset's own answers, so the export takes per-turn rows itself
    default = export(sources, work / "default.jsonl", fmt="specforge")
    assert default.per_turn and default.rows == per_turn.rows
    assert (work / "default.jsonl").read_text() == (work / "per_turn.jsonl").read_text()
    pre = export(sources, work / "speculators.jsonl", fmt="speculators")

    # what was left out, and why: the dataset's own answers never in a whole row; the system
    # message right before the answer (SpecForge's parser would cut the reply) left out of both
    n_hl = len(recs["HL"])
    assert whole.datasets["HL"]["dropped"] == {"original_answers": n_hl}
    assert whole.datasets["SY"]["dropped"] == {"role_order": 1}
    assert per_turn.datasets["SY"]["dropped"] == {"role_order": 1}
    assert per_turn.datasets["HL"]["rows"] == n_hl  # one row each: the reply the target made
    assert pre.rows == sum(
        len(replies(Record.from_json(r))) for r in by_id.values()
    )  # every reply, exact tokens
    hl = [json.loads(x) for x in (work / "per_turn.jsonl").read_text().splitlines()]
    tool_row = next(r for r in hl if r["id"] == "HL-000005#turn1")  # after the dataset's answer
    assert tool_row["conversations"][1]["tool_calls"] == TOOL_CALL
    assert tool_row["conversations"][2]["tool_call_id"] == "call_1"

    # the cut replies: left out by default, in every format; kept on demand in exact rows
    cut_src = [Source("h", "CUT", outputs(cut) / "CUT.jsonl", {})]
    assert export(cut_src, work / "c1.jsonl", fmt="specforge").datasets["CUT"]["dropped"] == {
        "empty": 4
    }
    kept = export(
        cut_src,
        work / "c2.jsonl",
        fmt="speculators",
        drop=effective_drop("speculators", False, keep="empty"),
    )
    assert kept.rows == 4

    res = subprocess.run(
        [vllm_python, str(Path(__file__).with_name("trainers_read.py")), str(model), str(work)],
        env=rig.trainers_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    read = json.loads((work / "read.json").read_text())
    # the docs' SpecForge run config is one SpecForge 0.2.0 accepts, reading our file pre-tokenized
    assert read.pop("readme_config") == {"prompts_path": "train.jsonl", "mode": "online"}

    def want(path: Path, per_reply: bool) -> list[tuple]:
        out = []
        for row in (json.loads(x) for x in path.read_text().splitlines()):
            rid = row.get("primary_id") or row.get("source_id") or row["id"]
            k = None  # which of the record's generated replies the row trains
            if "assistant_turn_index" in row:
                ends = [i for i, _ in replies(Record.from_json(by_id[rid]))]
                k = ends.index(len(row["conversations"]) - 1)
            if "primary_id" in row:
                k = int(row["id"].rsplit("_gen", 1)[1])
            out.append(expected(by_id[rid], k if per_reply else None))
        return sorted(out)

    assert made(read["specforge"]) == want(work / "specforge.jsonl", False)
    assert made(read["specforge_per_turn"]) == want(work / "per_turn.jsonl", True)
    exact = want(work / "speculators.jsonl", True)
    assert made(read["specforge_pretokenized"]) == exact
    assert made(read["speculators"]) == exact

    # the thinking carries loss (the template keeps it); the dataset's own answers never do
    vocab = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
    end_think, original = vocab["</think>"], vocab["<unk>"]
    end_turn = vocab["<|im_end|>"]
    for name, rows in read.items():
        for r in rows:
            trained = [t for t, m in zip(r["input_ids"], r["loss_mask"]) if m]
            # each trained reply: its thinking closed, its answer ended
            assert trained and trained.count(end_think) == trained.count(end_turn) >= 1, name
            assert original not in trained, name  # ORIGINAL ANSWER (unknown words): never trained
    assert ORIGINAL not in (work / "specforge.jsonl").read_text()
