"""What the user said stays said, typed as a user types it (the venv's `invoke` from the repository
root, on the built-in `local` host): the job keeps its caps on the host; a restart's flag changes only
what it names, a bare restart and the watcher's restart run the same caps, every restart prints the
caps with what changed marked, and clearing is said by name."""

from __future__ import annotations

import json
import os
import re
import signal

import pytest
import yaml

from tests.conftest import record_ids, records, status, wait_for, write_prompts
from tests.helpers.as_typed import ok, typed

DATASETS = ("B1", "B2", "B3")


def _config(tmp_path, n_prompts: int, tokens_per_s: float, recover) -> tuple:
    root = tmp_path / "host"
    for ds in DATASETS:
        write_prompts(tmp_path / "data" / "prompts" / f"{ds}.jsonl", n_prompts, ds)
    data = {
        "default_host": "box",
        "hosts": {"box": {"connect": "local", "remote_dir": str(root)}},
        "job": {
            "datasets": {
                ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 100} for ds in DATASETS
            },
            "engine": {"kind": "simulate", "concurrency": 4, "tokens_per_s": tokens_per_s},
            "sampling": {"max_tokens": 110},  # a share of the answers is cut: counted below
        },
        "recover": recover,
    }
    path = tmp_path / "hosts.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, root


def kept(root) -> dict:
    return json.loads((root / "run" / "caps.json").read_text())


def done(root) -> dict[str, int]:
    return {ds: len(set(record_ids(root, ds))) for ds in DATASETS}


def slowed_and_deployed(config) -> dict:
    """The engine slowed so the next run outlasts the test (no setting of the records' changes),
    deployed; hosts.yaml's data, for a test's own edits after."""
    data = yaml.safe_load(config.read_text())
    data["job"]["engine"]["tokens_per_s"] = 100
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    ok("invoke deploy", config)
    return data


def finish(config) -> None:
    assert "finished" in ok("invoke tail", config).splitlines()[-1]


@pytest.fixture
def box(tmp_path):
    config, root = _config(tmp_path, 16, 200_000, recover=False)
    ok("invoke deploy", config)
    yield config, root
    typed("invoke stop --grace 0", config)


@pytest.mark.slow
def test_a_flag_changes_only_what_it_names_and_a_bare_restart_keeps_every_cap(box):
    config, root = box
    ok("invoke restart --max-samples 4", config)
    finish(config)
    assert done(root) == {"B1": 4, "B2": 4, "B3": 4}

    out = ok("invoke restart --cap B2=6", config)
    assert "B2's target goes up (4 → 6 prompts)" in out  # said before anything is done
    assert out.index("goes up") < out.index("started runner")
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("B")}
    assert "4 → 6" in rows["B2"] and "→" not in rows["B1"] and "→" not in rows["B3"]
    finish(config)
    assert done(root) == {"B1": 4, "B2": 6, "B3": 4}  # the others kept --max-samples 4

    out = ok("invoke restart", config)  # after a deploy, after a fix: nothing said, nothing changed
    assert "caps unchanged" in out and "goes up" not in out
    finish(config)
    assert done(root) == {"B1": 4, "B2": 6, "B3": 4}
    assert kept(root)["max_samples"] == 4 and kept(root)["caps"] == {"B2": 6}
    # a runner with nothing to do still counts every record of the job, not only its own
    cut = {ds: sum(r["finish_reason"] == "length" for r in records(root, ds)) for ds in DATASETS}
    assert sum(cut.values()) > 0
    assert {ds: d["finish_length"] for ds, d in status(root)["datasets"].items()} == cut
    every = sum(cut.values()) / 14
    assert f"finish=length {every:.1%}" in ok("invoke tail --once", config)

    ok("invoke restart --max-samples 8", config)  # the default moves; B2's own cap stays
    finish(config)
    assert done(root) == {"B1": 8, "B2": 6, "B3": 8}

    ok("invoke restart --cap B2=all --datasets B1,B2", config)  # B2 back to the default
    finish(config)
    assert done(root) == {"B1": 8, "B2": 8, "B3": 8}
    assert kept(root) == {
        "max_samples": 8,
        "caps": {},
        "max_tokens": None,
        "datasets": ["B1", "B2"],
        "stage": "generate",
        "eval_samples": None,
        "baseline": False,
    }

    out = ok("invoke restart --dry-run --max-samples all --datasets all", config)
    assert "dry run" in out and "{" not in out  # a table, not a Python dict
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("B")}
    assert "8 → all" in rows["B1"] and "not run → all" in rows["B3"]
    assert kept(root)["max_samples"] == 8  # a dry run changes nothing

    ok("invoke restart --reset-caps --max-samples 10", config)
    finish(config)
    assert done(root) == {"B1": 10, "B2": 10, "B3": 10}
    assert kept(root) == {
        "max_samples": 10,
        "caps": {},
        "max_tokens": None,
        "datasets": None,
        "stage": "generate",
        "eval_samples": None,
        "baseline": False,
    }


@pytest.mark.parametrize(
    "flag, words",
    [
        ("--max-samples 0", "--max-samples: expected a number >= 1 or `all`"),
        ("--cap B2=-1", "N must be >= 1"),
        ("--cap B2=0", "N must be >= 1"),
        ("--cap B9=4", "unknown dataset B9"),
    ],
)
def test_an_impossible_cap_is_bad_input_in_one_line(tmp_path, flag, words):
    config, _ = _config(tmp_path, 4, 200_000, recover=False)
    res = typed(f"invoke restart {flag}", config)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], lines


def test_the_help_names_how_to_clear(tmp_path):
    out = ok("invoke restart --help", tmp_path / "unused.yaml")
    for words in ("`all`: every prompt", "DS=all", "`none`: no budget", "--reset-caps"):
        assert words in " ".join(out.split()), out


def test_the_watchers_restart_of_a_killed_runner_keeps_every_cap(tmp_path):
    # a job that outlasts the test by construction: 400 prompts a dataset at 100 tokens a second
    config, root = _config(tmp_path, 400, 100, recover={"backoff": 1})
    ok("invoke deploy", config)
    try:
        ok("invoke restart --max-samples 300 --cap B2=7 --max-tokens 90k", config)
        ok("invoke restart --cap B3=11", config)  # live: the runner keeps running
        first = status(root)
        want = {
            "max_samples": 300,
            "caps": {"B2": 7, "B3": 11},
            "max_tokens": 90_000,
            "datasets": None,
            "stage": "generate",
            "eval_samples": None,
            "baseline": False,
        }
        assert first["caps"] == want == kept(root)
        os.kill(first["pid"], signal.SIGKILL)
        wait_for(
            lambda: status(root)["pid"] != first["pid"] and status(root)["state"] == "running",
            timeout=60,
            what="the watcher's new runner",
        )
        assert status(root)["caps"] == want  # the live re-cap too, not only the last start's flags
        assert {ds: d["target"] for ds, d in status(root)["datasets"].items()} == {
            "B1": 300,
            "B2": 7,
            "B3": 11,
        }
    finally:
        typed("invoke stop --grace 0", config)


def test_a_restart_that_changes_nothing_touches_nothing_and_a_dataset_not_deployed_changes_nothing(
    tmp_path,
):
    config, root = _config(tmp_path, 400, 100, recover={"backoff": 1})  # outlasts the test
    ok("invoke deploy", config)
    try:
        ok("invoke restart --max-samples 300 --cap B2=7", config)
        pid = status(root)["pid"]
        run = root / "run"
        files = ("caps.json", "supervise.json", "control.json")
        before = {f: (run / f).read_bytes() if (run / f).exists() else None for f in files}
        for line in ("invoke restart --max-samples 300", "invoke restart"):
            out = ok(line, config)
            assert f"caps unchanged: runner pid {pid} runs them already; nothing touched" in out
            assert {f: (run / f).read_bytes() if (run / f).exists() else None for f in files} == (
                before
            )

        assert "not the one deployed" not in ok("invoke status", config)  # the same job: no word
        # hosts.yaml has B9 now; the deployed job does not: bad input, before anything changes
        write_prompts(tmp_path / "data" / "prompts" / "B9.jsonl", 4, "B9")
        data = yaml.safe_load(config.read_text())
        data["job"]["datasets"]["B9"] = {"prompts": "data/prompts/B9.jsonl", "est_tokens": 100}
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        for line in ("invoke restart --datasets B9", "invoke restart --dry-run --cap B9=3"):
            res = typed(line, config)
            assert res.returncode == 2, res.stdout + res.stderr
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1 and "unknown dataset B9" in lines[0], lines
            assert lines[0].endswith("invoke deploy`"), lines
            assert {f: (run / f).read_bytes() if (run / f).exists() else None for f in files} == (
                before
            )
        assert status(root)["pid"] == pid and status(root)["state"] == "running"
        differs = "hosts.yaml's job is not the one deployed: `"
        assert differs in ok("invoke status", config)  # said wherever the job is looked at
        answer = ok("invoke restart", config)
        assert "caps unchanged" in answer  # no B9 kept to fail on
        assert differs in answer and "the runner goes on with the release it runs" in answer
    finally:
        typed("invoke stop --grace 0", config)
    # stopped is stopped wherever the job is shown: no dataset running, nothing on its way
    out = ok("invoke status", config)
    rows = [line for line in out.splitlines() if line.split()[:1] in (["B1"], ["B2"], ["B3"])]
    assert len(rows) == 3 and "running" not in out, out
    assert {row.split()[2] for row in rows} <= {"stopped", "pending"}, out
    assert {row.split()[5] for row in rows} == {"-"}, out  # no ETA for a job that is not running
    dry = ok("invoke restart --dry-run", config)
    assert "running" not in dry, dry


@pytest.mark.slow
def test_records_beyond_a_lowered_cap_are_counted_apart_wherever_the_count_appears(box, tmp_path):
    """A dataset's records are those of its first N prompts: a cap lowered after its records were
    made leaves them on the host, out of the counts, the tokens, the cuts and the export, and every
    command that counts says how many lie beyond it."""
    config, root = box
    ok("invoke restart --max-samples 8", config)
    finish(config)
    ok("invoke restart --cap B2=3", config)
    finish(config)
    b2 = {r["index"]: r for r in records(root, "B2")}
    assert sorted(b2) == list(range(8))  # nothing deleted
    inside = [b2[i] for i in range(3)]
    d = status(root)["datasets"]["B2"]
    assert (d["done"], d["target"], d["records"]) == (3, 3, 8)
    assert d["completion_tokens"] == sum(r["usage"]["completion_tokens"] for r in inside)
    assert d["finish_length"] == sum(r["finish_reason"] == "length" for r in inside)
    assert "B2 3/3 +5 beyond the cap" in ok("invoke tail --once", config)
    answer = ok("invoke status", config)
    assert "records beyond the cap" in answer and "B2 5" in answer.split("beyond the cap")[1]

    out, pulled = tmp_path / "train.jsonl", tmp_path / "pulled"
    ok(f"invoke export --format sharegpt --out {out} --pulled {pulled} --keep empty,length", config)
    manifest = json.loads((tmp_path / "train.jsonl.manifest.json").read_text())
    assert manifest["datasets"]["B2"]["cap"] == 3
    assert manifest["datasets"]["B2"]["dropped"] == {"beyond_cap": 5}
    assert manifest["datasets"]["B2"]["kept"] == 3 and manifest["datasets"]["B1"]["kept"] == 8
    ok(
        f"invoke export --format sharegpt --out {out} --pulled {pulled} --keep empty,length,beyond_cap",
        config,
    )
    manifest = json.loads((tmp_path / "train.jsonl.manifest.json").read_text())
    assert manifest["datasets"]["B2"]["kept"] == 8

    page = tmp_path / "r.html"
    ok(f"invoke report --out {page}", config)
    assert "3 (+5 beyond the cap)" in page.read_text()

    # B2's file rewritten with its prompts in reverse, deployed and run: its first three prompts are
    # others now. status, export and the report count the same three records, by the file as it is
    # now (export went by the index each record was made at: six of them)
    prompts = tmp_path / "data" / "prompts" / "B2.jsonl"
    prompts.write_text("".join(reversed(prompts.read_text().splitlines(keepends=True))))
    ok("invoke deploy", config)
    ok("invoke restart", config)
    finish(config)
    d = status(root)["datasets"]["B2"]
    assert (d["done"], d["target"], d["records"]) == (3, 3, 11)
    ok(f"invoke export --format sharegpt --out {out} --pulled {pulled} --keep empty,length", config)
    manifest = json.loads((tmp_path / "train.jsonl.manifest.json").read_text())
    assert manifest["datasets"]["B2"]["kept"] == 3, manifest["datasets"]["B2"]
    assert manifest["datasets"]["B2"]["dropped"] == {"beyond_cap": 8}
    ok(f"invoke report --out {page}", config)
    assert "3 (+8 beyond the cap)" in page.read_text()


def test_a_settings_edit_is_said_at_deploy_and_a_restart_names_every_dataset_it_would_mix(
    tmp_path,
):
    """hosts.yaml's sampling edited and deployed while the job runs: deploy says so at once, naming
    every dataset with records and what changed, with the ways out; a restart (a dry run too) that
    would start a new runner refuses before the running one is stopped, naming them all in one
    line; a change of caps alone goes to the running runner live (it keeps the records' settings);
    --force restarts with them mixed."""
    config, root = _config(tmp_path, 400, 100_000, recover=False)
    ok("invoke deploy", config)
    ok("invoke restart --max-samples 2", config)  # records in every dataset
    finish(config)
    data = slowed_and_deployed(config)
    try:
        ok("invoke restart --max-samples 300", config)
        wait_for(lambda: status(root)["in_flight"], what="answers in flight")
        pid = status(root)["pid"]
        made_with = (root / "current").resolve().name  # the release the records were made with
        data["job"]["sampling"]["temperature"] = 0.7
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        out = ok("invoke deploy", config)
        assert (
            "settings differ from the records': B1, B2, B3: their records were made with "
            "different sampling (sampling.temperature (unset) → 0.7)"
        ) in out, out
        assert "deploy the old settings back" in out and "invoke rollback`" in out
        assert "invoke restart --force` to mix them" in out
        shown = " ".join(ok("invoke status", config).split())  # the way status points works
        assert "whose settings differ from those B1, B2, B3's records were made with" in shown
        # the rollback that gives them back, named: a plain one goes to the last release that ran,
        # which may not have them
        back = f"invoke rollback --to {made_with}`, a release made with them"
        assert back in shown, shown
        assert "`invoke restart` to run it" not in shown, shown
        run = root / "run"
        before = {
            f: (run / f).read_bytes() for f in ("caps.json", "control.json") if (run / f).exists()
        }
        for line in ("invoke restart", "invoke restart --dry-run", "invoke restart --hard"):
            res = typed(line, config)
            assert res.returncode == 2, res.stdout + res.stderr
            lines = res.stderr.strip().splitlines()
            assert len(lines) == 1, lines
            assert lines[0].startswith(
                "error: B1, B2, B3: their records were made with different sampling "
                "(sampling.temperature (unset) → 0.7): a new runner would refuse to mix them; "
                "nothing was stopped or started"
            ), lines
            assert "or restart with --force to mix them" in lines[0] and back in lines[0]
            assert {f: (run / f).read_bytes() for f in before} == before
            assert status(root)["pid"] == pid and status(root)["state"] == "running"
        out = ok("invoke restart --cap B1=5", config)  # caps alone: the running runner takes them
        assert f"re-capped live: runner pid {pid} kept running" in out, out
        assert "the deployed release is not started" in out
        assert kept(root)["caps"]["B1"] == 5
        assert status(root)["pid"] == pid and status(root)["state"] == "running"
        mixing = (
            "--force {}: B1, B2, B3: their records were made with different sampling "
            "(sampling.temperature (unset) → 0.7); resumed with the new ones, each {} records made "
            "with more than one set of settings"
        )
        out = " ".join(ok("invoke restart --force --dry-run", config).split())
        assert f"box: {mixing.format('would mix settings', 'would hold')}" in out, out
        out = ok("invoke restart --force", config)
        first = out.splitlines()[0]  # on the host's line, before what it did
        assert first.startswith(f"box: {mixing.format('mixes settings', 'now holds')}"), out
        assert status(root)["pid"] != pid and status(root)["state"] == "running"
        # once records are made with the new settings, a rollback to the release before them says
        # that a new runner would be refused there, at the rollback, not first at the restart
        meta = root / "data" / "outputs" / "B2.meta.json"
        wait_for(
            lambda: json.loads(meta.read_text())["sampling"].get("temperature") == 0.7,
            what="a B2 record made with the new settings",
        )
        out = " ".join(ok("invoke rollback", config).split())
        assert f"current -> {made_with}" in out, out
        assert "settings differ from the records': " in out and "B2" in out, out
        assert "0.7 → (unset)" in out, out
        assert "a new runner is refused until they agree" in out, out
        assert "invoke rollback --to ID`), or" in out, out
        assert "invoke restart --force` to mix them" in out, out
    finally:
        typed("invoke stop --grace 0", config)


@pytest.mark.slow
def test_a_cap_lowered_live_says_the_answers_in_flight_beyond_it_and_sends_none_past_it(tmp_path):
    """`restart --cap B1=1` on a running job: the answers already in flight past the new cap are
    not cancelled; the answer says how many per dataset, they alone are kept beyond it (with the
    records there before), and nothing new is sent past it."""
    config, root = _config(tmp_path, 400, 40, recover=False)  # 4 in flight, seconds each
    ok("invoke deploy", config)
    try:
        ok("invoke restart --datasets B1 --max-samples 300", config)
        # the window is full: at most one of the 4 in flight is prompt 0, the rest lie past cap 1
        wait_for(lambda: status(root)["datasets"]["B1"]["in_flight"] == 4, what="B1's window")
        out = ok("invoke restart --cap B1=1", config)
        assert "re-capped live" in out, out
        match = re.search(
            r"B1: (\d+) answers? in flight beyond the new cap finish and (?:are|is) kept beyond "
            r"it \(nothing new is sent past it(?:; (\d+) records there already)?",
            out,
        )
        assert match, out
        flying, there = int(match[1]), int(match[2] or 0)
        assert flying >= 3, out
        finish(config)
    finally:
        typed("invoke stop --grace 0", config)
    past = [r for r in records(root, "B1") if r["index"] >= 1]
    assert len(past) == there + flying  # those in flight at the re-cap, and none sent after it


STATE = re.compile(r"\b(budget reached|complete|running|pending|stopped)\b")


def states(out: str) -> dict[str, str]:
    """A table's state column, per dataset row (status's table or the restart's)."""
    rows = [line for line in out.splitlines() if line.split()[:1] in (["B1"], ["B2"], ["B3"])]
    return {r.split()[0]: m.group(1) if (m := STATE.search(r)) else "" for r in rows}


def test_the_restarts_caps_table_says_each_state_as_status_says_it(tmp_path):
    """A dataset its token budget stopped short is `budget reached` in the restart's table as in
    status (`complete` read as every prompt answered); a dry run on a running job says a dataset at
    work `running` (not `pending`)."""
    config, root = _config(tmp_path, 400, 100_000, recover=False)
    ok("invoke deploy", config)
    ok("invoke restart --max-samples 4 --max-tokens 1", config)  # one answer each spends it
    finish(config)
    assert set(states(ok("invoke status", config)).values()) == {"budget reached"}
    out = ok("invoke restart --max-samples 5", config)  # a start: the new runner's own rows
    assert states(out) == {ds: "budget reached" for ds in DATASETS}, out
    out = ok("invoke restart --dry-run --max-samples 6", config)
    assert states(out) == {ds: "budget reached" for ds in DATASETS}, out
    finish(config)
    slowed_and_deployed(config)
    try:
        ok("invoke restart --max-samples 300 --max-tokens none", config)
        wait_for(lambda: status(root)["datasets"]["B1"]["in_flight"], what="B1 at work")
        assert states(ok("invoke status", config))["B1"] == "running"
        out = ok("invoke restart --dry-run --max-samples 350", config)
        assert states(out)["B1"] == "running", out
    finally:
        typed("invoke stop --grace 0", config)


def test_a_cap_raised_past_a_file_the_status_does_not_count_says_the_prompts_it_reaches(box):
    """A dataset the last run's status has no counts of (added since, or a job last run in another
    stage): `--max-samples 7000` over its 16 prompts says it goes up to 16, every prompt, as it does
    for the datasets the status counts, never `4 → 7,000`."""
    config, root = box
    ok("invoke restart --max-samples 4", config)
    finish(config)
    write_prompts(config.parent / "data" / "prompts" / "B4.jsonl", 16, "B4")
    data = yaml.safe_load(config.read_text())
    data["job"]["datasets"]["B4"] = {"prompts": "data/prompts/B4.jsonl", "est_tokens": 100}
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    ok("invoke deploy", config)
    out = ok("invoke restart --dry-run --max-samples 7000", config)
    assert "targets go up: B1, B2, B3, B4 (4 → 16 prompts: every prompt of each file)" in out
    assert "7,000 prompts" not in out
    row = next(line.split() for line in out.splitlines() if line.startswith("B4"))
    assert row[-3:] == ["0", "16*", "pending"], out  # no records yet: none done, exactly


def test_a_dataset_taken_out_of_the_job_says_its_kept_cap_is_dropped(box):
    """B3 taken out of hosts.yaml and deployed: its kept cap cannot stay (the runner would refuse
    it, and no flag could clear it), so it goes, and the restart says so, its dry run too (with no
    row for a dataset the job no longer has); put back, B3 runs at the default unless given one."""
    config, root = box
    ok("invoke restart --max-samples 4 --cap B3=2", config)
    finish(config)
    data = yaml.safe_load(config.read_text())
    b3 = data["job"]["datasets"].pop("B3")
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    deployed = ok("invoke deploy", config)  # what the job changes in: said, not `modified` alone
    assert "job.json: datasets.B3 {" in deployed and "→ (unset)" in deployed, deployed
    said = "B3: its kept cap of 2 dropped: the deployed job has no B3"
    dry = ok("invoke restart --dry-run", config)
    assert said in dry and not [x for x in dry.splitlines() if x.startswith("B3 ")], dry
    assert said in ok("invoke restart", config)
    assert "B3" not in json.loads((root / "run" / "caps.json").read_text())["caps"]
    data["job"]["datasets"]["B3"] = b3
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    ok("invoke deploy", config)
    assert "dropped" not in ok("invoke restart", config)


def test_the_datasets_a_run_leaves_out_are_said_where_its_rows_are_shown(box):
    """`--datasets B2` starts a runner of B2 alone: the others are in no row and no figure, and
    status and tail say which and that their records are kept (it read as if they were gone)."""
    config, root = box
    ok("invoke restart --max-samples 2", config)
    finish(config)
    ok("invoke restart --datasets B2 --max-samples 3", config)
    finish(config)
    said = "not run (--datasets): B1, B3: their records are kept, out of the rows and the total"
    out = ok("invoke status", config)
    assert said in out and not [x for x in out.splitlines() if x.split()[:1] == ["B1"]], out
    assert status(root)["not_run"] == ["B1", "B3"]
    ok("invoke restart --datasets all", config)
    finish(config)
    assert "not run" not in ok("invoke status", config)


def test_a_target_grown_with_its_file_is_said_before_the_restart_runs_it(box, tmp_path):
    """Prompts appended to a file run with every prompt: the target grows (16 → 20) with no cap
    changed, and the restart's dry run says so, as it says a raised cap."""
    config, root = box
    ok("invoke restart", config)
    finish(config)
    path = tmp_path / "data" / "prompts" / "B1.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    more = [x.replace('"B1-0000', '"B1-0001') for x in lines[:4]]  # four new ids at its end
    path.write_text("".join(lines + more))
    ok("invoke deploy", config)
    said = "box: B1's target goes up (16 → 20 prompts: every prompt of the file)"
    assert said in ok("invoke restart --dry-run", config)
    ok("invoke restart", config)
    finish(config)
    assert status(root)["datasets"]["B1"]["done"] == 20
    assert "goes up" not in ok("invoke restart --dry-run", config)  # nothing more to run


def test_plan_leaves_the_datasets_a_run_leaves_out_out_of_its_totals(box):
    """With `--datasets B2` kept, plan's to-do and ETA counted B1 and B3, which would not run."""
    config, root = box
    ok("invoke restart --datasets B2 --max-samples 2", config)
    finish(config)
    out = ok("invoke plan --tokens-per-dataset 1k --tokens-per-s 100", config)
    rows = {x.split()[0]: x.split() for x in out.splitlines() if x.split()[:1] in (["B1"], ["B2"])}
    assert rows["B1"][-2:] == ["not", "run"] and rows["B2"][-2:] != ["not", "run"], out
    assert "not run (--datasets): B1, B3: in none of the totals" in out
    line = next(x for x in out.splitlines() if "tokens to do at" in x)
    assert line.strip().startswith(rows["B2"][-2]), (line, rows["B2"])  # B2's alone
    assert "token budget" not in out
    # a kept token budget under the plan's target is said: --apply keeps it (plan's caps went
    # unreached, each dataset `budget reached`, with no word of it)
    ok("invoke restart --max-tokens 600", config)
    finish(config)
    out = " ".join(ok("invoke plan --tokens-per-dataset 1k --tokens-per-s 100", config).split())
    assert (
        "a token budget of 600 per dataset is kept (`--max-tokens`): each dataset stops there, "
        "short of these caps, `--apply` included; `invoke restart --max-tokens none` drops it"
    ) in out, out


def test_a_dry_run_over_a_file_cut_at_its_top_does_not_say_complete(box, tmp_path):
    """B1 (ids) complete at 8 of 16; its first four lines cut and deployed: the same target of 8
    now holds four prompts never asked. The dry run said `8 8 complete` and the restart then made
    four answers; it counts the records in the new target from the records, as the runner will."""
    config, root = box
    ok("invoke restart --max-samples 8", config)
    finish(config)
    path = tmp_path / "data" / "prompts" / "B1.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[4:]))
    ok("invoke deploy", config)
    dry = ok("invoke restart --dry-run", config)
    row = next(x.split() for x in dry.splitlines() if x.split()[:1] == ["B1"])
    assert row[-3:] == ["4", "8", "pending"], dry
    ok("invoke restart", config)
    finish(config)
    assert status(root)["datasets"]["B1"]["done"] == 8
    assert len(records(root, "B1")) == 12  # four new: the dry run's 4 of 8 was the truth


def test_a_restart_onto_a_slower_engine_is_reckoned_at_its_own_speed_at_once(box):
    """The job's first answers came at 200k tok/s; restarted onto an engine of 100 tok/s, its
    first minute said `ETA 0m16s*` for 3m06s of work: the earlier engine's mean, as no answer of
    its own had ended. Its answers are measured as they stream: the ETA is its own at once, not
    starred, and no shorter than the work left at the engine's speed allows."""
    config, root = box
    ok("invoke restart --max-samples 4", config)
    finish(config)
    slowed_and_deployed(config)  # 100 tok/s
    ok("invoke restart --max-samples 16", config)
    seen = {}

    def measured() -> bool:
        st = status(root)
        if st["state"] == "running" and st.get("eta_guess") is False and st.get("eta_s"):
            seen.update(st)
            return True
        return False

    wait_for(measured, what="the slower engine's answers measured as they stream")
    left = sum(d["remaining_tokens"] for d in seen["datasets"].values())
    assert seen["eta_s"] * 100 >= 0.5 * left, (seen["eta_s"], left)  # not the earlier engine's
    shown = re.search(r"ETA (\S+);", ok("invoke status", config))
    assert shown and not shown.group(1).endswith("*"), shown
