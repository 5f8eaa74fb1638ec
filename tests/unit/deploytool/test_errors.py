"""An expected failure carries its exit code and the host's lines; several hosts' failures are one
error that keeps each host's words and says bad input only when every host's was."""

from __future__ import annotations

from deploytool.errors import (
    ConfigError,
    ConnectError,
    DeployToolError,
    ExitCode,
    MultiHostError,
    RemoteError,
    UsageError,
)


def test_each_kind_has_its_exit_code_and_one_may_be_given():
    assert ExitCode.OK == 0 and ExitCode.FAILED == 1 and ExitCode.BAD_INPUT == 2
    assert ConfigError("x").code == UsageError("x").code == ExitCode.BAD_INPUT
    assert ConnectError("x").code == RemoteError("x").code == ExitCode.FAILED
    e = DeployToolError("refused", ExitCode.BAD_INPUT, details=["log 1", "log 2"])
    assert (str(e), e.code, e.details) == ("refused", ExitCode.BAD_INPUT, ("log 1", "log 2"))
    assert DeployToolError("x").details == ()


def test_several_hosts_failing_keep_every_hosts_words_and_results():
    bad_flag, down = UsageError("no such flag"), ConnectError("gpu2 unreachable", details=["why"])
    both = MultiHostError({"gpu3": "ok"}, {"gpu1": bad_flag, "gpu2": down})
    assert str(both) == "gpu1: no such flag; gpu2: gpu2 unreachable"
    assert both.code == ExitCode.FAILED  # one host failed on the host side
    assert both.details == ("gpu2: why",) and both.results == {"gpu3": "ok"}
    only_input = MultiHostError({}, {"gpu1": bad_flag, "gpu2": ConfigError("bad key")})
    assert only_input.code == ExitCode.BAD_INPUT
