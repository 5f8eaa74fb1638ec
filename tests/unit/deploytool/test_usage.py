"""A mistyped command line is one line that says what was meant, with exit status 2: an unknown
flag (with the closest one), an unknown task, a stray argument, a missing value, a value of the
wrong type; through invoke's own Program, as both our programs parse."""

from __future__ import annotations

import pytest
from invoke import Collection, Program, task

from deploytool import usage
from deploytool.errors import ExitCode


@task(help={"max_samples": "each dataset's first N", "grace": "seconds"})
def restart(c, max_samples=None, grace=30.0, hard=False):
    """Restart."""


@task
def tail(c):
    """Tail."""


class Typed(Program):
    """invoke's Program, answering bad input the way our programs do (installed on this class)."""


usage.install(Typed)


def usage_error(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as e:
        Typed(namespace=Collection(restart, tail), binary="invoke").run(["invoke", *argv])
    assert e.value.code == ExitCode.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_an_unknown_flag_names_the_closest_and_where_the_flags_are_listed(capsys):
    assert usage_error(capsys, "restart", "--max-sample", "40") == (
        "error: restart has no flag --max-sample (did you mean --max-samples?); "
        "`invoke restart --help` lists them"
    )
    assert usage_error(capsys, "--nope") == "error: no option --nope; `invoke --help` lists them"


def test_an_unknown_task_and_a_stray_argument(capsys):
    assert (
        usage_error(capsys, "tial")
        == "error: no task named 'tial' (did you mean 'tail'?); `invoke --list` lists them"
    )
    assert usage_error(capsys, "restart", "7000") == (
        "error: restart takes no argument '7000' (a value goes after its flag); "
        "`invoke restart --help` lists them"
    )


def test_a_missing_value_and_a_value_of_the_wrong_type(capsys):
    assert usage_error(capsys, "restart", "--grace") == (
        "error: restart --grace: needs a value; `invoke restart --help` says what it takes"
    )
    assert usage_error(capsys, "restart", "--grace", "abc") == (
        "error: restart --grace: expected a number, got 'abc'"
    )


def test_installing_twice_wraps_once(capsys):
    before = Typed.parse_tasks
    usage.install(Typed)
    assert Typed.parse_tasks is before
    assert usage_error(capsys, "restart", "--max-sample", "1").count("did you mean") == 1


def test_invokes_own_config_flag_is_refused_with_the_line_that_reads_hosts_yaml(capsys):
    # invoke's --config is its settings file (skipped when missing): read as ours it never is
    want = (
        "error: --config is invoke's settings file, not hosts.yaml: "
        "type `DEPLOYTOOL_CONFIG='job 2.yaml' invoke restart --max-samples 5`"
    )
    assert usage_error(capsys, "restart", "--max-samples", "5", "--config", "job 2.yaml") == want
    assert usage_error(capsys, "-f", "job 2.yaml", "restart", "--max-samples", "5") == want
    assert usage_error(capsys, "restart", "--config=job 2.yaml", "--max-samples", "5") == want
