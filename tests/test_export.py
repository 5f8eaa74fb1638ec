"""invoke export: the pulled records as each trainer reads them, with a manifest whose counts add up;
through the CLI and the real sshd, from a job with a one-turn and a whole-conversation dataset."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from deploytool.errors import DeployToolError
from deploytool.ops.export import Source, export
from deploytool.views.progress import fmt_tokens
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
from tests.helpers.as_typed import ok, typed
from tests.helpers.conversations import ORIGINAL, write_conversations
from tests.helpers.training_rows import assistant_turns, generated


def lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture
def finished_job(tmp_path, ssh_rig, openai_server):
    srv = openai_server(shape="vllm", cut_in_thinking=0.25, seed=5)
    project = tmp_path / "p"
    write_prompts(project / "data" / "prompts" / "B1.jsonl", 30)
    write_conversations(project / "data" / "prompts" / "MT.jsonl", 12)
    write_conversations(project / "data" / "prompts" / "HL.jsonl", 8, ds="HL")
    job = base_job(
        datasets={
            "B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 100},
            "MT": {"prompts": "data/prompts/MT.jsonl", "est_tokens": 300, "turns": "all"},
            # turns: last: the history's answers are the dataset's own, only the last is the target's
            "HL": {"prompts": "data/prompts/HL.jsonl", "est_tokens": 100},
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


def why_left_out(rec: dict, whole: bool) -> str | None:
    """The default reason a record's row is left out, worked out from the record alone."""
    convo = rec["conversations"]
    mine = generated(rec)
    if not all(m["content"].strip() for m in mine):
        return "empty"
    if rec["finish_reason"] == "length":
        return "length"
    if whole and sum(m["role"] == "assistant" for m in convo) > len(mine):
        return "original_answers"
    return None


def export_cli(cfg, project, *args):
    res = cli(cfg, "export", "--no-pull", *args, cwd=project)
    assert res.returncode == 0, res.stdout + res.stderr
    out = args[args.index("--out") + 1]
    return lines(project / out), json.loads((project / f"{out}.manifest.json").read_text())


@pytest.mark.slow
def test_export_writes_each_format_and_a_manifest_that_adds_up(finished_job):
    cfg, project, host_dir = finished_job
    recs = {ds: records(host_dir, ds) for ds in ("B1", "MT", "HL")}
    by_id = {r["id"]: r for rs in recs.values() for r in rs}
    cut = {ds: sum(r["finish_reason"] == "length" for r in rs) for ds, rs in recs.items()}
    assert cut["B1"] and cut["MT"] and cut["HL"]  # the drops below have something to drop

    res = cli(cfg, "export", "--whole", "--out", "train.jsonl", cwd=project)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "pulled into" in res.stdout  # the new bytes were pulled first
    assert not (project / "pulled" / "gpu" / "MT.partial.jsonl").exists()  # host-side state only
    rows = lines(project / "train.jsonl")
    manifest = json.loads((project / "train.jsonl.manifest.json").read_text())
    assert set(manifest["drop"]) == {
        "empty",
        "length",
        "original_answers",
        "role_order",
        "beyond_cap",
    }
    assert "data.train_data_path" in manifest["reads_as"]
    for ds in ("B1", "MT", "HL"):
        m = manifest["datasets"][ds]
        want = Counter(why_left_out(r, whole=True) for r in recs[ds])
        kept = want.pop(None, 0)
        assert m["records"] == len(recs[ds]) and m["dropped"] == dict(want), ds
        assert m["kept"] == m["rows"] == kept
        assert m["model"] == "test-model" and m["extra_body"] == {"return_token_ids": True}
        assert m["sampling"]["max_tokens"] == 8192 and m["hosts"] == ["gpu"]
        # each record written names its release (the releases and times are of the rows written,
        # not of records left out: a dataset with none written has none)
        assert bool(m["releases"]) == bool(m["rows"]) and "unknown" not in m["releases"]
        assert (m["first_record"] <= m["last_record"]) if m["rows"] else not m["first_record"]
    assert manifest["datasets"]["MT"]["turns"] == "all"
    assert manifest["datasets"]["HL"]["rows"] == 0  # every HL row would train the dataset's answers
    assert manifest["totals"]["rows"] == len(rows)
    assert {r["id"] for r in rows} == {i for i, r in by_id.items() if not why_left_out(r, True)}
    assert ORIGINAL not in (project / "train.jsonl").read_text()
    mt = next(r for r in rows if r["id"].startswith("MT"))
    assert [m["role"] for m in mt["conversations"]] == ["system"] + ["user", "assistant"] * 3
    assert all("reasoning_content" in m for m in mt["conversations"] if m["role"] == "assistant")

    # --per-turn: one row per reply the target made, its history before it (thinking kept: the
    # template decides), the dataset's own answers only ever history
    pt, man = export_cli(cfg, project, "--per-turn", "--out", "pt.jsonl")
    assert man["drop"].keys() == {"empty", "length", "role_order", "beyond_cap"}
    assert "train_only_last_turn: true" in man["reads_as"]
    hl = [r for r in pt if r["source_id"].startswith("HL")]
    assert {r["source_id"] for r in hl} == {r["id"] for r in recs["HL"] if not why_left_out(r, 0)}
    # never a row for an original answer; the index is the reply's place among the row's assistant
    # turns, as SpecForge's expansion writes it (HL's reply follows two of the dataset's answers)
    assert all(r["id"].endswith("#turn2") and r["assistant_turn_index"] == 2 for r in hl)
    assert all(r["status"] == "success" for r in pt)
    assert all(r["source_row_index"] == by_id[r["source_id"]]["index"] for r in pt)
    assert all(ORIGINAL not in r["conversations"][-1]["content"] for r in pt)
    assert all(ORIGINAL in r["conversations"][2]["content"] for r in hl)  # as history, untrained
    two = next(r for r in pt if r["id"].startswith("MT") and r["id"].endswith("#turn1"))
    assert "reasoning_content" in two["conversations"][2]  # turn 0, as history
    assert two["conversations"][-1] == by_id[two["source_id"]]["conversations"][4]

    # the default: HL's conversations hold the dataset's own answers, so whole rows cannot train
    # only generated replies; the export takes per-turn rows by itself, for the whole file, and
    # says so: every reply that is not cut trained exactly once, nothing else
    res = cli(cfg, "export", "--no-pull", "--out", "default.jsonl", cwd=project)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "one row per generated reply (per-turn): HL's conversations hold" in res.stdout
    total = sum(len(rs) for rs in recs.values())
    assert f"{total:,} records read" in res.stdout
    default = lines(project / "default.jsonl")
    man = json.loads((project / "default.jsonl.manifest.json").read_text())
    assert default == pt and man["per_turn"] and "train_only_last_turn: true" in man["reads_as"]
    assert man["per_turn_why"].startswith("HL's conversations")
    made = [
        (r["id"], t)
        for r in by_id.values()
        for k, (m, t) in enumerate(zip(generated(r), assistant_turns(r)))
        if m["content"].strip() and (r.get("turns") or [r])[k]["finish_reason"] != "length"
    ]
    trained = [(r["source_id"], r["assistant_turn_index"]) for r in default]
    assert sorted(trained) == sorted(made)  # exactly once each
    # a reason that leaves rows out names the flag that keeps them
    assert "empty (--keep empty)" in res.stdout

    # speculators: one row per reply, the exact tokens, loss on the generated ones, and the
    # conversation of exactly the turn its tokens hold
    sp, man = export_cli(cfg, project, "--format", "speculators", "--out", "sp.jsonl")
    assert man["drop"].keys() == {
        "empty",
        "beyond_cap",
    }  # rows of exact tokens: a cut reply is the model's own
    for row in sp:
        rec = by_id[row["primary_id"]]
        k = int(row["id"].rsplit("_gen", 1)[1])
        gen = rec["turns"][k] if "turns" in rec else rec
        assert row["input_ids"] == gen["prompt_token_ids"] + gen["token_ids"]
        assert row["loss_mask"] == [0] * len(gen["prompt_token_ids"]) + [1] * len(gen["token_ids"])
        reply = generated(rec)[k]
        assert row["conversations"][-1] == reply and ORIGINAL not in reply["content"]
    assert {r["primary_id"] for r in sp if r["primary_id"].startswith("HL")} == {
        r["id"] for r in recs["HL"] if r["conversations"][-1]["content"].strip()
    }

    sg, man = export_cli(cfg, project, "--format", "sharegpt", "--out", "sg.jsonl")
    assert len(sg) == manifest["totals"]["rows"]  # the same rows as specforge's whole ones
    assert {t["from"] for r in sg for t in r["conversations"]} == {"system", "human", "gpt"}
    assert any(t["value"].startswith("<think>\n") for r in sg for t in r["conversations"])

    # --keep: what the format leaves out, asked for by name
    kept, man = export_cli(cfg, project, "--keep", "empty,length", "--out", "all.jsonl")
    assert man["datasets"]["B1"]["kept"] == len(recs["B1"]) and not man["datasets"]["B1"]["dropped"]

    for args, err in (
        (("--format", "alpaca"), "--format: expected one of"),
        (("--drop", "short"), "--drop: unknown reason short"),
        (("--keep", "short"), "--keep: unknown reason short"),
        (("--drop", "length", "--keep", "length"), "--drop and --keep both name length"),
    ):
        res = cli(cfg, "export", *args, cwd=project)
        assert res.returncode == 2 and err in res.stderr, res.stderr


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


def test_settings_are_those_of_the_rows_written_where_the_meta_file_places_each_change(tmp_path):
    """A dataset resumed with --force under new settings, then capped below the first record made
    with them: every row written was made with the first settings, yet export asked for --mixed
    and its manifest named the new ones."""
    first = {"model": "m", "sampling": {"temperature": 1.0}, "chat_template_kwargs": {}}
    recs = [rec(i) for i in range(4)]  # r0, r1 made at 1.0; r2, r3 at 0.7 (from r2's line on)
    since = sum(len(json.dumps(r) + "\n") for r in recs[:2])
    meta = dict(first, sampling={"temperature": 0.7}, since=since, previous=[first])
    capped = write_pulled(tmp_path / "h", "A", recs, meta)
    capped.cap = 2
    r = export([capped], tmp_path / "x.jsonl", fmt="specforge", drop=("beyond_cap",))
    m = json.loads((tmp_path / "x.jsonl.manifest.json").read_text())["datasets"]["A"]
    assert r.kept == 2 and m["sampling"] == {"temperature": 1.0} and m["previous_settings"] == []
    whole = write_pulled(tmp_path / "g", "A", recs, meta)  # every record written: both settings
    with pytest.raises(DeployToolError, match="records made under different settings"):
        export([whole], tmp_path / "y.jsonl", fmt="specforge", drop=())
    assert not (tmp_path / "y.jsonl").exists()
    export([whole], tmp_path / "y.jsonl", fmt="specforge", drop=(), mixed=True)
    m = json.loads((tmp_path / "y.jsonl.manifest.json").read_text())["datasets"]["A"]
    assert m["sampling"] == {"temperature": 0.7}
    assert [p["sampling"] for p in m["previous_settings"]] == [{"temperature": 1.0}]


def test_what_is_left_out_is_counted_in_rows_whether_a_reply_or_a_whole_record_goes(tmp_path):
    """A per-turn export makes a row of each reply: a record beyond the cap or seen on another host
    leaves out its rows, counted as rows like a reply left out alone (one unit in the manifest)."""
    meta = {"model": "m", "sampling": {}, "chat_template_kwargs": {}}

    def convo(i: int) -> dict:  # two generated replies: two rows per turn
        turns = [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"}] * 2
        return {"id": f"c{i}", "index": i, "finish_reason": "stop", "conversations": turns,
                "turns": [{"finish_reason": "stop", "usage": {}}] * 2}  # fmt: skip

    a = write_pulled(tmp_path / "h1", "C", [convo(0), convo(1), convo(2)], meta)
    a.cap = 2  # c2 lies beyond the cap
    b = write_pulled(tmp_path / "h2", "C", [convo(0)], meta)  # c0 again, from another host
    r = export([a, b], tmp_path / "x.jsonl", fmt="specforge", per_turn=True)
    assert r.rows == 4 and r.datasets["C"]["dropped"] == {"beyond_cap": 2, "duplicate": 2}


@pytest.mark.slow
def test_export_says_per_dataset_the_rows_and_tokens_it_keeps_and_what_each_filter_dropped(
    tmp_path,
):
    """Typed on a `local` host (the stand-in engine): `invoke export` says per dataset the rows kept
    of those made, what each filter dropped and the reply tokens the kept rows train; the manifest
    holds the same."""
    root = tmp_path / "host"
    for ds in ("B1", "B8"):
        write_prompts(tmp_path / "data" / "prompts" / f"{ds}.jsonl", 12, ds)
    config = tmp_path / "hosts.yaml"
    job = {
        "datasets": {
            ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 100} for ds in ("B1", "B8")
        },
        "engine": {"kind": "simulate", "concurrency": 4, "tokens_per_s": 200_000},
        "sampling": {"max_tokens": 110},  # a share of the replies is cut: `length`, left out
    }
    hosts = {"box": {"connect": "local", "remote_dir": str(root)}}
    config.write_text(yaml.safe_dump({"default_host": "box", "hosts": hosts, "job": job}))
    ok("invoke deploy", config)
    try:
        ok("invoke restart", config)
        assert "finished" in ok("invoke tail", config).splitlines()[-1]
        out = tmp_path / "train.jsonl"
        answer = ok(f"invoke export --out {out} --pulled {tmp_path / 'pulled'}", config)
    finally:
        typed("invoke stop --grace 0", config)
    manifest = json.loads((tmp_path / "train.jsonl.manifest.json").read_text())
    for ds in ("B1", "B8"):
        recs = records(root, ds)
        cut = [r for r in recs if r["finish_reason"] == "length"]
        kept = [r for r in recs if r["finish_reason"] != "length"]
        assert cut and kept, ds  # something to drop, something kept
        tokens = sum(r["usage"]["completion_tokens"] for r in kept)
        line = (
            f"  {ds}: {len(kept)} of 12 rows kept ({len(cut)} dropped: finish_reason length), "
            f"{fmt_tokens(tokens)} tokens"
        )
        assert line in answer.splitlines(), answer
        m = manifest["datasets"][ds]
        assert (m["rows"], m["tokens"], m["dropped"]) == (len(kept), tokens, {"length": len(cut)})
        assert m["dropped_tokens"] == {"length": sum(r["usage"]["completion_tokens"] for r in cut)}
    assert manifest["totals"]["tokens"] == sum(m["tokens"] for m in manifest["datasets"].values())
    assert "to keep what was left out: finish_reason length (--keep length)" in answer, answer
