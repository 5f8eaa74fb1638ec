"""A vLLM data-parallel group over hosts, read from hosts.yaml: which hosts hold which ranks, and
when one rank's death means the whole group must be restarted (and the one command that does it)."""

from __future__ import annotations

from deploytool.ops.dpgroup import group_of, problems
from remote.common.answers import LeftoverProcess, ServerState
from tests.conftest import write_config


def test_group_membership_and_what_counts_as_broken(tmp_path):
    dp = ["--data-parallel-size", "4", "--data-parallel-size-local", "2"]
    dp += ["--data-parallel-address", "gpu1", "--data-parallel-rpc-port", "13345"]
    hosts = {
        name: {"host": "127.0.0.1", "remote_dir": str(tmp_path / name)}
        for name in ("gpu1", "gpu2", "solo")  # solo: another job, no data parallel
    }
    hosts["gpu2"]["server"] = {"headless": True, "args": dp + ["--data-parallel-start-rank=2"]}
    hosts["solo"]["server"] = {"args": ["--tensor-parallel-size", "8"]}
    cfg = write_config(tmp_path, hosts, server={"args": dp})
    ranks = group_of(cfg, "gpu2", ["gpu2"])
    assert [(r.host, r.label) for r in ranks] == [("gpu1", "ranks 0-1"), ("gpu2", "ranks 2-3")]
    assert group_of(cfg, "solo", ["solo"]) == [] and "local" not in [r.host for r in ranks]

    up, gone = ServerState(up=True), LeftoverProcess(pid=41)
    fix = "invoke server.stop --host gpu1,gpu2 && invoke server.start --host gpu1,gpu2"
    assert problems(cfg, {"gpu1": up, "gpu2": up, "solo": ServerState()}) == []
    assert problems(cfg, {"gpu1": ServerState(), "gpu2": ServerState()}) == []  # stopped
    assert problems(cfg, {"gpu1": up, "gpu2": ServerState(died=True)}) == [
        f"gpu2: ranks 2-3 server died; the group must be restarted: {fix}"
    ]
    assert problems(cfg, {"gpu1": ServerState(up=True, engines_gone=[gone]), "gpu2": up}) == [
        f"gpu1: ranks 0-1 engine gone (pid 41); the group must be restarted: {fix}"
    ]
    assert problems(cfg, {"gpu2": ServerState(up=True, engines_gone=[gone])}) == [
        f"gpu2: ranks 2-3 engine gone (pid 41); the group must be restarted: {fix}"
    ]
