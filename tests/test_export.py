"""invoke export: the pulled records as each trainer reads them, with a manifest whose counts add up;
through the CLI and the real sshd, from a job with a one-turn and a whole-conversation dataset."""

from __future__ import annotations

import json

import pytest

from deploytool.errors import DeployToolError
from deploytool.export import Source, export
from tests.conftest import (
    base_job,
    cli,
    records,
    ssh_host_entry,
    status,
    wait_for,
    write_config,
    write_prompts,
)
from tests.test_conversations import write_conversations


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture
def finished_job(tmp_path, ssh_rig, openai_server):
    srv = openai_server(shape="vllm", cut_in_thinking=0.25, seed=5)
    project = tmp_path / "p"
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 30)
    write_conversations(project / "data" / "prompts" / "MT.jsonl", 12)
    job = base_job(
        datasets={
            "B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 100},
            "MT": {"prompts": "data/prompts/MT.jsonl", "est_tokens": 300, "turns": "all"},
        },
        engine={"kind": "openai", "base_url": srv.url, "model": "test-model", "concurrency": 8},
    )
    job["extra_body"] = {"return_token_ids": True}
    host_dir = tmp_path / "host"
    cfg = write_config(project, {"gpu": ssh_host_entry(ssh_rig, host_dir)}, job=job)
    assert cli(cfg, "deploy").returncode == 0
    assert cli(cfg, "restart").returncode == 0
    wait_for(lambda: status(host_dir)["state"] == "finished", timeout=60, what="finish")
    return cfg, project, host_dir


def test_export_writes_each_format_and_a_manifest_that_adds_up(finished_job):
    cfg, project, host_dir = finished_job
    recs = {ds: records(host_dir, ds) for ds in ("B1", "MT")}
    cut = {ds: sum(r["finish_reason"] == "length" for r in rs) for ds, rs in recs.items()}
    assert cut["B1"] and cut["MT"]  # the drop below has something to drop

    res = cli(cfg, "export", "--drop", "length", "--out", "train.jsonl", cwd=project)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "pulled into" in res.stdout  # the new bytes were pulled first
    assert not (project / "pulled" / "gpu" / "MT.partial.jsonl").exists()  # host-side state only
    rows = lines(project / "train.jsonl")
    manifest = json.loads((project / "train.jsonl.manifest.json").read_text())
    for ds in ("B1", "MT"):
        m = manifest["datasets"][ds]
        assert m["records"] == len(recs[ds]) and m["dropped"] == {"length": cut[ds]}
        assert m["kept"] + cut[ds] == m["records"] == m["rows"] + cut[ds]
        assert m["model"] == "test-model" and m["extra_body"] == {"return_token_ids": True}
        assert m["sampling"]["max_tokens"] == 8192 and m["hosts"] == ["gpu"]
        assert m["releases"] and "unknown" not in m["releases"]  # each record names its release
        assert m["first_record"] <= m["last_record"]
    assert manifest["datasets"]["MT"]["turns"] == "all"
    assert (
        manifest["totals"]["rows"]
        == len(rows)
        == sum(manifest["datasets"][d]["kept"] for d in ("B1", "MT"))
    )
    kept = {r["id"] for rs in recs.values() for r in rs if r["finish_reason"] != "length"}
    assert {r["id"] for r in rows} == kept  # exactly the cut ones left out
    mt = next(r for r in rows if r["id"].startswith("MT"))
    assert [m["role"] for m in mt["conversations"]] == ["system"] + ["user", "assistant"] * 3
    assert all("reasoning_content" in m for m in mt["conversations"] if m["role"] == "assistant")

    # --per-turn: one row per assistant turn, history without its thinking
    res = cli(
        cfg,
        "export",
        "--per-turn",
        "--no-pull",
        "--datasets",
        "MT",
        "--out",
        "pt.jsonl",
        cwd=project,
    )
    assert res.returncode == 0, res.stderr
    pt = lines(project / "pt.jsonl")
    assert len(pt) == sum(r["turns_done"] for r in recs["MT"])
    two = next(r for r in pt if r["id"].endswith("#turn1"))
    assert "reasoning_content" not in two["conversations"][2]  # turn 0, as history
    assert "reasoning_content" in two["conversations"][-1] and two["assistant_turn_index"] == 1

    # speculators: one row per generation, the exact tokens, loss on the generated ones
    res = cli(
        cfg, "export", "--format", "speculators", "--no-pull", "--out", "sp.jsonl", cwd=project
    )
    assert res.returncode == 0, res.stderr
    sp = lines(project / "sp.jsonl")
    assert len(sp) == len(recs["B1"]) + sum(r["turns_done"] for r in recs["MT"])
    by_id = {r["id"]: r for rs in recs.values() for r in rs}
    for row in sp:
        rec = by_id[row["primary_id"]]
        k = int(row["id"].rsplit("_gen", 1)[1])
        gen = rec["turns"][k] if "turns" in rec else rec
        assert row["input_ids"] == gen["prompt_token_ids"] + gen["token_ids"]
        assert row["loss_mask"] == [0] * len(gen["prompt_token_ids"]) + [1] * len(gen["token_ids"])

    res = cli(cfg, "export", "--format", "sharegpt", "--no-pull", "--out", "sg.jsonl", cwd=project)
    assert res.returncode == 0, res.stderr
    sg = lines(project / "sg.jsonl")
    assert len(sg) == len(recs["B1"]) + len(recs["MT"])
    assert {t["from"] for r in sg for t in r["conversations"]} == {"system", "human", "gpt"}
    assert any(t["value"].startswith("<think>\n") for r in sg for t in r["conversations"])

    res = cli(cfg, "export", "--format", "alpaca", cwd=project)
    assert res.returncode == 2 and "--format: expected one of" in res.stderr
    res = cli(cfg, "export", "--drop", "short", cwd=project)
    assert res.returncode == 2 and "--drop: unknown reason short" in res.stderr


def write_pulled(dirname, ds: str, recs: list[dict], meta: dict) -> Source:
    dirname.mkdir(parents=True, exist_ok=True)
    path = dirname / f"{ds}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return Source(dirname.name, ds, path, meta)


def rec(i: int, content="an answer", finish="stop", **extra) -> dict:
    convo = [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": content}]
    return {"id": f"r{i}", "index": i, "finish_reason": finish, "conversations": convo, **extra}


def test_settings_are_not_mixed_silently_and_token_ids_are_required(tmp_path):
    meta = {"model": "m", "sampling": {"temperature": 1.0}, "chat_template_kwargs": {}}
    a = write_pulled(tmp_path / "h", "A", [rec(0), rec(1, content=" "), rec(2)], meta)
    b = write_pulled(tmp_path / "h", "B", [rec(3)], dict(meta, sampling={"temperature": 0.6}))
    with pytest.raises(DeployToolError, match=r"different settings \(sampling: .*temperature"):
        export([a, b], tmp_path / "x.jsonl", fmt="specforge")
    assert not (tmp_path / "x.jsonl").exists()
    r = export([a, b], tmp_path / "x.jsonl", fmt="specforge", drop=("empty",), mixed=True)
    assert r.kept == 3 and r.dropped == 1 and r.datasets["A"]["dropped"] == {"empty": 1}
    m = json.loads((tmp_path / "x.jsonl.manifest.json").read_text())
    assert m["mixed_settings"] and m["datasets"]["B"]["sampling"] == {"temperature": 0.6}

    forced = write_pulled(tmp_path / "g", "A", [rec(0)], dict(meta, previous=[meta]))
    with pytest.raises(DeployToolError, match="resumed with --force"):
        export([forced], tmp_path / "y.jsonl", fmt="specforge")
    with pytest.raises(DeployToolError, match="no token ids.*return_token_ids: true"):
        export([a], tmp_path / "z.jsonl", fmt="speculators")
    assert not (tmp_path / "z.jsonl").exists()  # nothing half-written
