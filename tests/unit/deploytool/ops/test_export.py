"""export's rules before a row is written: which formats exist, which rows each format leaves out
by default and why, --drop/--keep on top (a contradiction refused), and one file for one set of
settings unless --mixed is said."""

from __future__ import annotations

import json

import pytest

from deploytool.errors import DeployToolError, ExitCode
from deploytool.ops import export as ex


def refused(fn, *args) -> str:
    with pytest.raises(DeployToolError) as e:
        fn(*args)
    assert e.value.code == ExitCode.BAD_INPUT
    return str(e.value)


def test_a_format_is_one_of_the_trainers():
    for fmt in ("specforge", "speculators", "sharegpt"):
        ex.check_format(fmt)
    assert refused(ex.check_format, "eagle") == (
        "--format: expected one of specforge, speculators, sharegpt, got 'eagle'"
    )


def test_each_format_leaves_out_what_its_trainer_would_mistrain():
    # speculators keeps token ids per reply: nothing is re-rendered, only empty replies go
    assert ex.default_drop("speculators", per_turn=False) == {"empty"}
    # re-rendered rows: a reply cut at max_tokens would gain an end of turn, whole rows would
    # train the dataset's own answers, and SpecForge's parser cuts some message orders
    assert ex.default_drop("sharegpt", False) == {"empty", "length", "original_answers"}
    assert ex.default_drop("sharegpt", True) == {"empty", "length"}
    assert ex.default_drop("specforge", True) == {"empty", "length", "role_order"}


def test_drop_and_keep_move_the_defaults_and_never_both():
    assert ex.effective_drop("speculators", False, drop="length") == (
        "empty",
        "length",
        "beyond_cap",
    )
    assert ex.effective_drop("specforge", True, keep="role_order, length, beyond_cap") == ("empty",)
    assert refused(ex.effective_drop, "specforge", True, "length", "length") == (
        "--drop and --keep both name length"
    )
    out = refused(ex.effective_drop, "specforge", True, "lenght")
    assert out.startswith(
        "--drop: unknown reason lenght (did you mean 'length'?); known: empty, length"
    )


def source(tmp_path, host, ds, **meta) -> ex.Source:
    path = tmp_path / host / f"{ds}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    (tmp_path / host / f"{ds}.meta.json").write_text(json.dumps(meta))
    return ex.Source(host, ds, path, meta)


def test_one_file_one_set_of_settings_unless_mixed_is_said(tmp_path):
    a = source(tmp_path, "gpu1", "B1", model="kimi", sampling={"temperature": 1.0})
    b = source(tmp_path, "gpu2", "B2", model="kimi", sampling={"temperature": 1.0})
    ex.check_settings([a, b], mixed=False)
    c = source(tmp_path, "gpu2", "B3", model="kimi", sampling={"temperature": 0.6})
    out = refused(ex.check_settings, [a, c], False)
    assert out.startswith("gpu1:B1 and gpu2:B3 were made with different settings (sampling:")
    assert '{"temperature": 1.0} vs {"temperature": 0.6}' in out and "--mixed" in out
    ex.check_settings([a, c], mixed=True)
    resumed = source(tmp_path, "gpu1", "B4", model="kimi", previous=[{"model": "other"}])
    assert "gpu1:B4: records made under different settings in one dataset" in refused(
        ex.check_settings, [resumed], False
    )


def test_sources_are_the_pulled_files_with_their_settings(tmp_path):
    source(tmp_path, "gpu1", "B1", model="kimi")
    (tmp_path / "gpu2").mkdir()
    (tmp_path / "gpu2" / "B1.jsonl").write_text("")  # no meta file: no settings known
    found = ex.find_sources(tmp_path, {"gpu1": ["B1", "B2"], "gpu2": ["B1"]})
    assert [(s.host, s.dataset, s.meta) for s in found] == [
        ("gpu1", "B1", {"model": "kimi"}),
        ("gpu2", "B1", {}),
    ]


def test_datasets_come_in_the_jobs_order_whatever_the_hosts_or_the_typed_order(tmp_path):
    """`--datasets B5,B2` listed B5 first, and two hosts' files came host by host (gpu1's B1, B2,
    then gpu2's B1, B2): the screen, the manifest and the rows follow the job's order."""
    from types import SimpleNamespace

    job = SimpleNamespace(dataset_names=lambda: ["B1", "B2", "B5", "B7"])
    config = SimpleNamespace(job_for=lambda name: job)
    hosts = [SimpleNamespace(name="gpu1"), SimpleNamespace(name="gpu2")]
    wanted = ex.wanted_datasets(config, hosts, "B5,B2")
    assert wanted == {"gpu1": ["B2", "B5"], "gpu2": ["B2", "B5"]}
    for host in ("gpu1", "gpu2"):
        for ds in ("B2", "B5"):
            source(tmp_path, host, ds)
    found = ex.find_sources(tmp_path, wanted)
    assert [(s.dataset, s.host) for s in found] == [
        ("B2", "gpu1"),
        ("B2", "gpu2"),
        ("B5", "gpu1"),
        ("B5", "gpu2"),
    ]
    # a dataset only a later host's job has goes where that job puts it
    later = ex.find_sources(tmp_path, {"gpu1": ["B5"], "gpu2": ["B2", "B5"]})
    assert [(s.dataset, s.host) for s in later] == [("B2", "gpu2"), ("B5", "gpu1"), ("B5", "gpu2")]


def test_the_manifest_says_each_hosts_cap_and_the_releases_of_what_was_written(tmp_path):
    """Two hosts with caps of their own: the manifest said the first one's (6) over rows of the
    other's beyond it; and it listed the releases of records left out (beyond a cap) too."""
    from types import SimpleNamespace

    a = source(tmp_path, "gpu1", "B8", model="kimi")
    b = source(tmp_path, "gpu2", "B8", model="kimi")
    a.cap, b.cap = 6, 10
    tally = ex.DatasetTally()
    written = SimpleNamespace(release="r-new", created=200)
    tally.records += 2  # one more read and left out, made by the release r-old
    tally.wrote(written)
    m = ex._manifest([a, b], {"B8": tally}, "sharegpt", (), False, False, tmp_path / "t.jsonl")
    entry = m["datasets"]["B8"]
    assert entry["cap"] == {"gpu1": 6, "gpu2": 10} and entry["hosts"] == ["gpu1", "gpu2"]
    assert entry["releases"] == ["r-new"] and entry["kept"] == 1 and entry["records"] == 2
    b.cap = 6
    m = ex._manifest([a, b], {"B8": tally}, "sharegpt", (), False, False, tmp_path / "t.jsonl")
    assert m["datasets"]["B8"]["cap"] == 6  # one cap for all: said once


def test_one_hosts_export_never_overwrites_the_file_of_the_others(tmp_path):
    """`invoke export -H gpu2` wrote `export-specforge.jsonl`, over the default hosts' file."""
    from tests.conftest import write_config

    box = {"connect": "local", "remote_dir": str(tmp_path / "h")}
    cfg = write_config(tmp_path, {"gpu1": box, "gpu2": box})
    assert ex.default_name(cfg, None, "specforge") == "export-specforge.jsonl"
    assert ex.default_name(cfg, "gpu1", "specforge") == "export-specforge.jsonl"  # the default
    assert ex.default_name(cfg, "gpu2", "sharegpt") == "export-sharegpt-gpu2.jsonl"
    assert ex.default_name(cfg, "gpu1,gpu2", "specforge") == "export-specforge-gpu1-gpu2.jsonl"
