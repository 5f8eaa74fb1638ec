"""Which datasets' records were made with other settings than a job's: those with a whole record
(a torn line alone is none) or answers in flight, run by the caps, in the answers' stage."""

from __future__ import annotations

import json

from remote.common.caps import Caps
from remote.common.jobspec import JobSpec, Paths
from remote.host.facts.made_with import has_records, mixed_settings


def test_a_dataset_with_records_of_other_settings_is_named_with_what_changed(tmp_path):
    paths = Paths(tmp_path)
    paths.ensure()
    job = {
        "datasets": {n: {"prompts": f"data/{n}.jsonl"} for n in ("B1", "B2", "B3")},
        "engine": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m2"},
    }
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(job))
    spec = JobSpec.load(job_file)
    made = spec.settings(spec.datasets[0])
    for name, lines in (("B1", '{"id": "x"}\n'), ("B2", '{"id": "x", "to'), ("B3", "")):
        paths.meta(name).write_text(json.dumps(dict(made, model="m1")))
        paths.output(name).write_text(lines)
    assert not has_records(paths.output("B2")) and has_records(paths.output("B1"))
    got = mixed_settings(paths, Caps(), job_file)
    assert list(got) == ["B1"] and "model" in got["B1"]
    # answers in flight are records its stop's grace may write
    assert list(mixed_settings(paths, Caps(), job_file, frozenset({"B3"}))) == ["B1", "B3"]
    # a --force took model m1 for B3's records to come (none made yet: its meta still says the
    # job's own): a runner of m2 opens it, unless the forced runner's grace writes one first
    paths.meta("B3").write_text(json.dumps(dict(made, accepted=dict(made, model="m1"))))
    assert list(mixed_settings(paths, Caps(), job_file)) == ["B1"]
    got = mixed_settings(paths, Caps(), job_file, frozenset({"B3"}))
    assert list(got) == ["B1", "B3"] and got["B3"] == {"model": ("m1", "m2")}
    assert mixed_settings(paths, Caps(datasets=["B2"]), job_file) == {}  # B1 is not run
    assert mixed_settings(paths, Caps(stage="hidden-states"), job_file) == {}


def test_the_way_back_is_a_release_that_ran_before_a_newer_one_never_run(tmp_path):
    """A refused restart named `a58ce0c0e6df` as the way back: the newest release with the records'
    settings, deployed by a deploy cut short, never run, and with an est_tokens of its own."""
    import os

    from remote.common.state import note_ran
    from remote.host.facts.made_with import release_made_with

    paths = Paths(tmp_path)
    paths.ensure()
    base = {
        "datasets": {"B1": {"prompts": "data/B1.jsonl"}},
        "engine": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m1"},
    }
    for i, (rid, model) in enumerate((("ran1", "m1"), ("never", "m1"), ("now", "m2"))):
        rel = tmp_path / "releases" / rid
        rel.mkdir(parents=True)
        (rel / "job.json").write_text(
            json.dumps(dict(base, engine=dict(base["engine"], model=model)))
        )
        os.utime(rel, (1000 + i, 1000 + i))  # deployed in this order
    spec = JobSpec.load(tmp_path / "releases" / "ran1" / "job.json")
    paths.meta("B1").write_text(json.dumps(spec.settings(spec.datasets[0])))
    paths.output("B1").write_text('{"id": "x"}\n')
    assert release_made_with(paths, Caps(), ["B1"]) == "never"  # the newest with them
    note_ran(paths, tmp_path / "releases" / "ran1")
    assert release_made_with(paths, Caps(), ["B1"]) == "ran1"  # one that ran comes first
