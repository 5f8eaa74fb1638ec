"""plan's disk line: the stage's row tokens at the caps, from the records' own token ids; the bytes a
token takes from the rows made, else the model's config; what the last stage runner made."""

from __future__ import annotations

import json

from remote.common.caps import Target
from remote.common.jobspec import Paths, ServerSpec
from remote.common.records import RowLine
from remote.common.status import DatasetStatus, JobStatus
from remote.queries.stage_bytes import stage_bytes


def record(i: int, prompt: int, reply: int | None) -> dict:
    """A one-turn record as the job writes it (token ids only where the job asked for them)."""
    rec = {
        "id": f"B1-{i}",
        "dataset": "B1",
        "index": i,
        "finish_reason": "stop",
        "usage": {"prompt_tokens": prompt, "completion_tokens": reply or 0},
        "conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        "model": "m",
    }
    if reply is not None:
        rec.update(prompt_token_ids=list(range(prompt)), token_ids=list(range(reply)))
    return rec


def outputs(paths: Paths, recs: list[dict]) -> None:
    paths.outputs.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(r) for r in recs]
    paths.output("B1").write_text("\n".join(lines) + '\n{"id": "B1-torn"')


def test_rows_are_sized_from_the_records_ids_and_the_models_config(tmp_path):
    paths = Paths(tmp_path / "host")
    outputs(paths, [record(0, 10, 30), record(1, 20, 40), record(2, 5, None)])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"num_hidden_layers": 61, "hidden_size": 7168, "torch_dtype": "bfloat16"})
    )
    got = stage_bytes(paths, ServerSpec(model=str(model)), {"B1": Target(100)})
    assert got.sampled == 2  # the record without ids is left out, as the stage leaves it
    assert got.tokens == 50 * 100  # a record's rows hold 50 tokens on average, 100 records
    assert got.bytes_per_token == 4 * 7168 * 2 and "config.json" in got.basis
    assert got.left == 5000 * 57344 and got.free > 0
    three = stage_bytes(
        paths, ServerSpec(model=str(model), hidden_states={"layers": [1, 2, 3]}), {"B1": Target(1)}
    )
    assert three.bytes_per_token == 3 * 7168 * 2


def ledger(paths: Paths, *rows: tuple[str, int], torn: bool = True) -> None:
    """The stage's rows.jsonl: a row of each (record, tokens), 100 bytes a token."""
    path = paths.hidden_states / "B1" / "rows.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        RowLine(
            n=n,
            id=f"{rec}_gen0",
            record=rec,
            tokens=t,
            layers=4,
            hidden=2,
            dtype="BF16",
            bytes=t * 100,
        ).line()
        for n, (rec, t) in enumerate(rows)
    ]
    path.write_bytes(b"".join(lines) + (b'{"n": 9, "tok' if torn else b""))


def test_the_rows_made_give_the_bytes_and_what_is_left_in_any_stage(tmp_path):
    """Read from the stage's ledger, not the job's status: the same figures while the job makes
    answers again as while it made the rows."""
    paths = Paths(tmp_path / "host")
    outputs(paths, [record(0, 10, 30)])
    ledger(paths, ("B1-0", 40))
    paths.ensure()
    for stage in ("hidden-states", "generate"):
        JobStatus(stage=stage, datasets={"B1": DatasetStatus(completion_tokens=7)}).write(
            paths.status
        )
        got = stage_bytes(paths, ServerSpec(model="org/absent"), {"B1": Target(3)})
        assert got.bytes_per_token == 100.0 and got.basis == "measured on the rows made"
        assert (got.tokens, got.made, got.left) == (120, 40, 8000)


def test_nothing_to_size_from_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    paths = Paths(tmp_path / "host")
    outputs(paths, [record(0, 10, 30)])
    got = stage_bytes(paths, ServerSpec(model="org/absent"), {"B1": Target(2)})
    assert got.left is None and "org/absent's config.json is not on the host" in got.basis
    assert stage_bytes(Paths(tmp_path / "none"), ServerSpec(), {"B1": Target(2)}).sampled == 0


def test_a_finished_stage_has_nothing_left_whatever_the_estimate_says(tmp_path):
    """The stage made every row of these caps (and the rows may be freed since): nothing to write,
    though the estimate (the first records' mean × the cap) is above the tokens it made; a row of a
    record the prompt file no longer has among the target's is not counted made."""
    paths = Paths(tmp_path / "host")
    outputs(paths, [record(0, 10, 30), record(1, 10, 90)])  # a mean of 70 tokens a record
    ledger(paths, ("B1-0", 40), ("B1-1", 100))
    got = stage_bytes(paths, ServerSpec(model="org/absent"), {"B1": Target(2)})
    assert (got.tokens, got.made) == (140, 140)
    more = stage_bytes(paths, ServerSpec(model="org/absent"), {"B1": Target(4)})  # caps never run
    assert (more.tokens, more.made) == (280, 140)
    moved = Target(2, frozenset({"B1-1", "B1-7"}))
    got = stage_bytes(paths, ServerSpec(model="org/absent"), {"B1": moved})
    assert (got.tokens, got.made) == (170, 100)


def test_the_simulated_engine_names_no_model(tmp_path):
    paths = Paths(tmp_path / "host")
    outputs(paths, [record(0, 10, 30)])
    got = stage_bytes(
        paths, ServerSpec(model="moonshotai/Kimi-K2.5"), {"B1": Target(2)}, simulated=True
    )
    assert got.left is None and "Kimi" not in got.basis and "simulated" in got.basis
