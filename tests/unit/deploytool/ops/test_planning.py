"""plan's arguments: token counts as people write them, refused in one line when they are not."""

from __future__ import annotations

import pytest

from deploytool.errors import UsageError
from deploytool.ops.planning import parse_plan_args


def test_counts_are_read_as_written():
    assert parse_plan_args("10M", None) == (10_000_000, None)
    assert parse_plan_args("2.5k", "1.2k") == (2_500, 1_200.0)


@pytest.mark.parametrize(
    "target, rate, says",
    [
        ("lots", None, "10M"),
        ("0", None, "--tokens-per-dataset: expected a positive token count, got 0: `invoke plan"),
        ("1M", "0", "--tokens-per-s: expected a positive token count, got 0; leave it out"),
        ("1M", "-5", "--tokens-per-s: expected a positive token count, got -5"),
    ],
)
def test_bad_counts_are_usage_errors(target, rate, says):
    with pytest.raises(UsageError, match=says):
        parse_plan_args(target, rate)


def test_the_plan_sends_the_host_only_what_sizes_the_stage(monkeypatch):
    from deploytool.ops import planning
    from remote.common.answers import HostPlan
    from remote.common.jobspec import ServerSpec

    sent = []
    monkeypatch.setattr(planning, "call", lambda conn, req: sent.append(req) or HostPlan())
    spec = ServerSpec(model="m", env={"VLLM_API_KEY": "secret"}, hidden_states={"layers": [1, 2]})
    planning.plan_host(type("Conn", (), {"name": "gpu1"})(), 1000, None, spec)
    (req,) = sent
    assert req.spec == ServerSpec(model="m", hidden_states={"layers": [1, 2]})
    assert "secret" not in " ".join(req.argv())  # the host's command line, as ps shows it
