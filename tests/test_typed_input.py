"""What a new user typed (issue 53), typed as a user types it (the venv's `invoke` and `deploytool`):
`invoke status` from inside the package, a hosts.yaml named by `--config`, a path to write that
cannot be written, `--max-samples` below 1, an empty `--datasets`. Each answers one line and the
exit status; none is a traceback, none shows another job than the one asked about."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, base_job, piped_env, write_config
from tests.helpers.as_typed import typed

DEPLOYTOOL = str(Path(sys.executable).with_name("deploytool"))
TWO = {ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": 100} for ds in ("B1", "B2")}


@pytest.fixture
def config(tmp_path) -> Path:
    """A hosts.yaml whose host has nothing deployed: each command answers before any job runs."""
    job = base_job(datasets=TWO)
    return write_config(
        tmp_path, {"box": {"connect": "local", "remote_dir": str(tmp_path / "h")}}, job
    ).path


def reply(res: subprocess.CompletedProcess, code: int) -> str:
    """The one line a command answered, once it is exactly one line and `code`."""
    out = (res.stdout + res.stderr).strip().splitlines()
    assert res.returncode == code and len(out) == 1, (res.returncode, res.stdout, res.stderr)
    return out[0]


def not_deployed(config: Path, binary: str = "invoke") -> str:
    if binary == "invoke":
        hint = f"DEPLOYTOOL_CONFIG={shlex.quote(str(config))} invoke deploy"
    else:
        hint = f"deploytool --config {shlex.quote(str(config))} deploy"
    return (
        f"error: nothing deployed in {config.parent / 'h'}, no such folder on the host (a typo in "
        f"hosts.yaml's remote_dir? a job deployed before is in another folder): run `{hint}` "
        "first to start one there"
    )


def test_invoke_typed_inside_the_package_runs_the_repositorys_tasks(config):
    from_root = typed("invoke status", config)
    assert reply(from_root, 1) == not_deployed(config)
    for sub in ("deploytool", "deploytool/views", "deploytool/ops"):
        res = typed("invoke status", config, cwd=REPO / sub)
        assert (res.returncode, res.stdout, res.stderr) == (1, from_root.stdout, from_root.stderr)


@pytest.mark.parametrize(
    "line",
    [
        "invoke status --config /nope.yaml",
        "invoke --config /nope.yaml status",
        "invoke status -f /nope.yaml",
    ],
)
def test_invokes_own_config_flag_is_refused_with_the_line_that_reads_the_file(config, line):
    assert reply(typed(line, config), 2) == (
        "error: --config is invoke's settings file, not hosts.yaml: "
        "type `DEPLOYTOOL_CONFIG=/nope.yaml invoke status`"
    )


def test_deploytools_config_after_the_task_is_the_file_read(config, tmp_path):
    project = tmp_path / "job1"  # a project of its own, job 1: never what job 2's line shows
    project.mkdir()
    write_config(project, {"box": {"connect": "local", "remote_dir": str(project / "h")}})
    env = {k: v for k, v in piped_env().items() if k != "DEPLOYTOOL_CONFIG"}
    for argv in (["status", "--config", str(config)], ["--config", str(config), "status"]):
        res = subprocess.run(
            [DEPLOYTOOL, *argv], cwd=project, env=env, capture_output=True, text=True, timeout=120
        )
        assert reply(res, 1) == not_deployed(config, "deploytool")


def test_a_path_to_write_whose_folder_is_missing_is_refused_before_any_host_is_asked(
    config, tmp_path
):
    missing = tmp_path / "nonexistent" / "dir"
    for line, flag, path in (
        ("invoke report --out {}", "--out", missing / "r.html"),
        ("invoke export --out {}", "--out", missing / "x.jsonl"),
        ("invoke pull --to {}", "--to", missing / "p"),
    ):
        res = typed(line.format(path), config)
        parent = path.parent
        assert (
            reply(res, 2)
            == f"error: {flag} {path}: the folder {parent} does not exist (make it first)"
        )
    assert not (tmp_path / "nonexistent").exists()  # no folder made


def test_a_folder_that_takes_no_new_files_is_refused(config):
    line = reply(typed("invoke pull --to /proc/nope", config), 2)
    assert line.startswith("error: --to /proc/nope: cannot write in /proc"), line


def test_export_from_a_pulled_folder_with_nothing_to_read_names_the_folder_and_the_pull(
    config, tmp_path
):
    """It answered 'no pulled records to export (nothing under the pulled folder …)' whatever the
    folder, even one that is not there."""
    pull = f"DEPLOYTOOL_CONFIG={shlex.quote(str(config))} invoke pull --to"
    missing = tmp_path / "nonexistent"
    assert reply(typed(f"invoke export --no-pull --pulled {missing}", config), 2) == (
        f"error: --pulled {missing}: no such folder: pull into it first (`{pull} {missing}`), "
        "or leave out --no-pull"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "box").mkdir()
    assert reply(typed(f"invoke export --no-pull --pulled {empty} --datasets B2", config), 2) == (
        f"error: no pulled records of box's B2 in {empty}: pull them first (`{pull} {empty}`), "
        "or leave out --no-pull"
    )
    assert not missing.exists()


@pytest.mark.parametrize("n", ["-1", "0"])
def test_max_samples_below_one_is_one_message(config, n):
    assert reply(typed(f"invoke restart --max-samples {n} --dry-run", config), 2) == (
        f"error: --max-samples: expected a number >= 1 or `all`, got {n} "
        "(to leave datasets out: --datasets)"
    )


def test_a_token_budget_of_nothing_is_bad_input_not_a_job_stopped_at_once(config):
    for value in ("0", "-1M"):  # one word for both (-1M said "non-negative", 0 then refused)
        assert reply(typed(f"invoke restart --max-tokens {value} --dry-run", config), 2) == (
            "error: --max-tokens: expected a token count >= 1 (10M, 500k, 2500000), or `none` for "
            f"no budget, got '{value}'"
        )


@pytest.mark.parametrize(
    "value, got",
    [('""', "or `all`, got ''"), ("B1,,B2", "got 'B1,,B2'"), ("B1,", "got 'B1,'")],
)
def test_an_empty_dataset_name_is_bad_input_never_every_dataset(config, value, got):
    for task in ("restart --dry-run", "export --no-pull"):
        res = typed(f"invoke {task} --datasets {value}", config)
        assert (
            reply(res, 2)
            == f"error: --datasets: expected dataset names, comma-separated (B2,B3), {got}"
        )


@pytest.mark.parametrize(
    "line",
    ['invoke stop -H ""', "invoke restart --host= --dry-run", 'invoke status -H " "'],
)
def test_an_empty_host_is_bad_input_never_the_default_host(config, line):
    """`invoke stop -H "$HOSTS"` with HOSTS unset stopped the default host (exit 0)."""
    said = reply(typed(line, config), 2)
    assert said.startswith("error: --host: given empty ("), said
    assert said.endswith("leave it out for the default host (box), or name one (--host box)")


@pytest.mark.parametrize(
    "line, said",
    [
        (
            "invoke plan --tokens-per-dataset 10M --tokens-per-s ''",
            "error: --tokens-per-s: expected a token count like 10M, 500k or 2500000, got ''",
        ),
        (
            "invoke plan --tokens-per-dataset ''",
            "error: --tokens-per-dataset: expected a token count like 10M, 500k or 2500000, got ''",
        ),
        (
            "invoke rollback --to ''",
            "error: --to: given empty; leave it out to go back to the last release a runner ran "
            "from, or name one (`invoke rollback --to ID`: an unknown ID lists the host's "
            "releases)",
        ),
        (
            "invoke export --no-pull --keep ''",
            "error: --keep: expected reasons, comma-separated (empty, length, original_answers, "
            "role_order, beyond_cap), got ''",
        ),
        (
            "invoke export --no-pull --drop length,",
            "error: --drop: expected reasons, comma-separated (empty, length, original_answers, "
            "role_order, beyond_cap), got 'length,'",
        ),
    ],
)
def test_a_flag_typed_empty_is_bad_input_never_the_flag_left_out(config, line, said):
    """`--tokens-per-s ''` planned at the measured speed; `--keep ''` wrote the default export."""
    assert reply(typed(line, config), 2) == said


@pytest.mark.parametrize("value", ["box,,box", "box,"])
def test_an_empty_name_among_hosts_is_bad_input(config, value):
    assert reply(typed(f"invoke status -H {value}", config), 2) == (
        f"error: --host: an empty name in '{value}': hosts are separated by one comma "
        "(--host gpu1,gpu2)"
    )


def test_a_dataset_given_twice_is_bad_input_never_the_last_one_silently(config):
    res = typed("invoke restart --cap B2=10 --cap B2=12 --dry-run", config)
    assert reply(res, 2) == "error: --cap gives B2 twice (B2=10 and B2=12): give each dataset once"
    res = typed("invoke restart --datasets B2,B2 --dry-run", config)
    assert (
        reply(res, 2) == "error: --datasets: B2 is named twice in 'B2,B2': give each dataset once"
    )


def test_hosts_names_no_server_for_a_job_of_the_built_in_engine(tmp_path):
    job = base_job(datasets=TWO, engine={"kind": "simulate"})
    cfg = write_config(
        tmp_path, {"box": {"connect": "local", "remote_dir": str(tmp_path / "h")}}, job
    )
    res = typed("invoke hosts", cfg.path)
    row = next(line for line in res.stdout.splitlines() if line.lstrip("│ ").startswith("box"))
    assert "none (engine simulate)" in row and "8000" not in row, res.stdout


def test_the_server_commands_say_a_job_of_the_built_in_engine_needs_no_server(tmp_path):
    """server.status said `server down` and server.start `no vllm beside …/python3`, where `invoke
    hosts` says the host has no server: both say so in one line, and nothing to start is no
    failure (exit 0); the host is left as it was."""
    from tests.conftest import write_prompts

    job = base_job(datasets=TWO, engine={"kind": "simulate"})
    cfg = write_config(
        tmp_path, {"box": {"connect": "local", "remote_dir": str(tmp_path / "h")}}, job
    )
    for ds in TWO:
        write_prompts(tmp_path / "data" / "prompts" / f"{ds}.jsonl", 2, ds)
    assert typed("invoke deploy", cfg.path).returncode == 0
    needs = "this host's job uses the built-in simulated engine (job.engine.kind: simulate)"
    assert (
        reply(typed("invoke server.status", cfg.path), 0)
        == f"box: no server: {needs}, which needs none"
    )
    assert reply(typed("invoke server.start", cfg.path), 0) == (
        f"box: no server to start: {needs}, which needs none"
    )
    assert not (tmp_path / "h" / "run" / "server.pid").exists()  # nothing was started


@pytest.mark.parametrize(
    "line, words",
    [
        ("invoke export --format specforg", "(did you mean 'specforge'?)"),
        ("invoke export --keep lenght", "(did you mean 'length'?)"),
        ("invoke restart --cap b2=3", "unknown dataset b2 (did you mean 'B2'?)"),
        ("invoke restart --stage hidden_states", "(did you mean 'hidden-states'?)"),
    ],
)
def test_a_mistyped_value_gets_a_did_you_mean_as_flags_and_keys_do(config, line, words):
    assert words in reply(typed(line, config), 2)


@pytest.mark.parametrize(
    "line, flag, meant",
    [
        ("invoke restart -max-samples 40", "restart has no flag -max-samples", "--max-samples"),
        ("invoke restart -max-samples=40", "restart has no flag -max-samples", "--max-samples"),
        ("invoke restart -dry-run", "restart has no flag -dry-run", "--dry-run"),
        ("invoke restart -host box", "restart has no flag -host", "--host"),
        ("invoke restart -cap B2=3", "restart has no flag -cap", "--cap"),
        ("invoke stop -grace 3", "stop has no flag -grace", "--grace"),
        ("invoke tail -log", "tail has no flag -log", "--log"),
        ("invoke export -pulled out", "export has no flag -pulled", "--pulled"),
    ],
)
def test_a_long_flag_typed_with_one_dash_is_named_whole_with_its_two_dash_spelling(
    config, line, flag, meant
):
    """invoke reads `-max-samples` as `-m -a -x …`: it answered `restart has no flag -m` (or `--`,
    or took `-cap`'s `-c` as its own --collection)."""
    task = flag.split()[0]
    want = f"error: {flag} (did you mean {meant}?); `invoke {task} --help` lists them"
    assert reply(typed(line, config), 2) == want


@pytest.mark.parametrize(
    "line",
    [
        "invoke restart --cap",
        "invoke restart --cap --dry-run",
        "invoke restart --dry-run --cap --max-samples 5",
    ],
)
def test_a_flag_given_many_times_with_no_value_is_refused_not_dropped(config, line):
    """invoke dropped a `--cap` with no value without a word: the restart then ran (a stopped job
    started again) as if it were not typed."""
    assert reply(typed(line, config), 2) == (
        "error: restart --cap: needs a value; `invoke restart --help` says what it takes"
    )


@pytest.mark.parametrize(
    "line, flag",
    [
        ("invoke restart --max-samples 20 --max-samples 30", "--max-samples"),
        ("invoke restart -H box --host box", "--host"),
    ],
)
def test_a_flag_of_one_value_given_twice_is_said_so(config, line, flag):
    """It answered `restart takes no argument '30' (a value goes after its flag)`."""
    assert (
        reply(typed(line, config), 2) == f"error: restart {flag}: given twice (it takes one value)"
    )


def test_a_value_that_begins_with_a_dash_and_a_short_flag_with_its_value_are_read_as_before(config):
    assert reply(typed("invoke stop --grace -50", config), 2) == (
        "error: --grace: expected seconds, 0 or more, got -50"
    )
    by_letter = reply(typed("invoke status -Hbox", config), 1)
    assert by_letter == reply(typed("invoke status --host box", config), 1)
    assert "nothing deployed" in by_letter


@pytest.mark.parametrize(
    "line, want",
    [
        (
            "invoke restart --cap B2=3,B3=4 --dry-run",
            "error: --cap 'B2=3,B3=4': one DS=N a flag: --cap B2=3 --cap B3=4",
        ),
        (
            "invoke plan --tokens-per-dataset 10M --tokens-per-s abc",
            "error: --tokens-per-s: expected a token count like 10M, 500k or 2500000, got 'abc'",
        ),
        (
            "invoke plan --tokens-per-dataset 10X",
            "error: --tokens-per-dataset: expected a token count like 10M, 500k or 2500000, got "
            "'10X'",
        ),
        ("invoke stop --grace -5", "error: --grace: expected seconds, 0 or more, got -5"),
    ],
)
def test_a_bad_value_names_its_flag_and_how_to_give_it(config, line, want):
    """Each as a newcomer typed it: the flag named first (as every other flag's error), and a list
    where one value is taken says how several are given."""
    assert reply(typed(line, config), 2) == want


def test_a_hint_about_another_host_names_it_whether_one_host_failed_or_one_of_several(tmp_path):
    """The command a failure's hint names acts on the host it is about: typed bare, it would act on
    the default host (a newcomer deployed `local` again, not the host that lacked a release)."""
    job = base_job(datasets=TWO)
    hosts = {name: {"connect": "local", "remote_dir": str(tmp_path / name)} for name in ("a", "c")}
    config = write_config(tmp_path, hosts, job).path
    hint = f"`DEPLOYTOOL_CONFIG={shlex.quote(str(config))} invoke deploy --host c`"
    (tmp_path / "c").mkdir()  # the folder is there, with no release in it
    assert reply(typed("invoke status --host c", config), 1) == (
        f"error: nothing deployed in {tmp_path / 'c'}: run {hint} first"
    )
    res = typed("invoke status --host a,c", config)
    assert res.returncode == 1
    assert f"c: FAILED: nothing deployed in {tmp_path / 'c'}: run {hint} first" in res.stdout


def test_tail_of_another_host_with_nothing_deployed_names_the_deploy_for_that_host(tmp_path):
    """It said to run `invoke deploy` first, which deploys the default host, not the one tailed."""
    hosts = {h: {"connect": "local", "remote_dir": str(tmp_path / h)} for h in ("box", "box2")}
    config = write_config(tmp_path, hosts, base_job(datasets=TWO)).path
    res = typed("invoke tail --once -H box2", config)
    hint = f"DEPLOYTOOL_CONFIG={shlex.quote(str(config))} invoke deploy --host box2"
    assert res.returncode == 1 and f"`{hint}` first" in res.stdout + res.stderr, res.stdout
