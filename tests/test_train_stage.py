"""The train stage as typed, on the built-in `local` host with the stand-in trainer (its Python named
by job.train.python): `invoke restart --stage train` trains on the hidden-states stage's rows, status
and tail say the epoch, step and loss, a trainer killed with kill -9 is started again and resumes
from its last checkpoint, a trainer that fails twice the same way is given up with its own error
line, and the end is a draft vLLM can serve (`server.draft.model: trained`)."""

from __future__ import annotations

import json
import os
import signal
import sys

import yaml

from remote.common import procinfo
from remote.common.codec import read_json
from remote.common.jobspec import Paths
from remote.common.state import ServerRecord
from remote.job.train.command import venv_name
from tests.conftest import free_port, status, wait_for, write_prompts
from tests.helpers.as_typed import ok, typed
from tests.helpers.stand_ins import fake_vllm
from tests.helpers.train_data import STAND_IN, stand_in_wheel

TOKEN_IDS = {"return_token_ids": True}


def trainer_python(tmp_path, **env) -> str:
    """A Python whose path holds the stand-ins (speculators' trainer, datasets), with the test's
    hooks in its environment: what job.train.python names."""
    path = tmp_path / "trainer-python"
    exports = "".join(f"export {k}='{v}'\n" for k, v in env.items())
    path.write_text(
        f'#!/bin/sh\nexport PYTHONPATH="{STAND_IN}:$PYTHONPATH"\n{exports}exec {sys.executable} "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


def train_job(tmp_path, recover=False, engine=None, notify=None, **env):
    """hosts.yaml of one `local` host whose job keeps token ids and trains with the stand-in: 2
    epochs, a checkpoint every half epoch; the host's remote_dir."""
    write_prompts(tmp_path / "data" / "prompts" / "B1.jsonl", 6, "B1")
    job = {
        "datasets": {"B1": {"prompts": "data/prompts/B1.jsonl", "est_tokens": 100}},
        "engine": {"kind": "simulate", "concurrency": 2, "tokens_per_s": 100_000, **(engine or {})},
        "extra_body": TOKEN_IDS,
        "train": {
            "python": trainer_python(tmp_path, **env),
            "epochs": 2,
            "checkpoint_freq": 0.5,
            "total_seq_len": 16,  # a row a step: an epoch of several steps
            "target_layers": [
                0,
                1,
                2,
            ],  # the stand-in engine keeps 4 layers: the last is the target's
        },
    }
    if notify is not None:  # each event's name and message, a line each
        job["notify"] = {"command": f'echo "$DEPLOYTOOL_EVENT $DEPLOYTOOL_MESSAGE" >> {notify}'}
    hosts = {"box": {"connect": "local", "remote_dir": str(tmp_path / "host")}}
    data = {"default_host": "box", "hosts": hosts, "job": job, "recover": recover}
    config = tmp_path / "hosts.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config, tmp_path / "host"


def hidden_states_made(config) -> None:
    for line in (
        "invoke deploy",
        "invoke restart --max-samples 5",
        "invoke tail",
        "invoke restart --stage hidden-states",
        "invoke tail",
    ):
        ok(line, config)


def train(root) -> dict:
    return status(root).get("train") or {}


def test_the_stage_trains_through_a_kill_of_its_trainer_and_ends_in_a_draft_vllm_serves(tmp_path):
    gate = tmp_path / "gate"
    gate.write_text("2")  # the trainer waits before its third step
    config, root = train_job(tmp_path, STAND_IN_TRAINER_GATE=str(gate))
    hidden_states_made(config)
    out = ok("invoke restart --stage train", config)
    assert "stage hidden-states → train" in out
    wait_for(lambda: train(root).get("step") == 2, what="two steps trained")
    shown = ok("invoke status", config)
    assert "stage train: running" in shown and "step 2/" in shown and "loss " in shown
    assert "rows 5 (B1 5)" in shown
    # a kill -9 of the trainer: started again, from its last checkpoint (never from the start)
    first = read_json(Paths(root).trainer)["pid"]
    os.kill(first, signal.SIGKILL)
    wait_for(
        lambda: (read_json(Paths(root).trainer) or {}).get("pid") not in (None, first),
        what="the trainer started again",
    )
    wait_for(lambda: "Resuming mid-epoch" in Paths(root).trainer_log.read_text(), what="resumed")
    gate.write_text("1000")
    ok("invoke tail", config)
    st = status(root)
    assert st["state"] == "finished" and st["train"]["restarts"] == 1
    assert "No previous training checkpoint found" in Paths(root).trainer_log.read_text()
    assert Paths(root).trainer_log.read_text().count("No previous training checkpoint found") == 1
    served = json.loads((Paths(root).trained_draft / "config.json").read_text())
    assert served["transformer_layer_config"]["num_aux_hidden_states"] == 3
    assert (Paths(root).trained_draft / "model.safetensors").is_file()
    shown = ok("invoke status", config)
    assert "stage train: finished" in shown and "server.draft.model: trained" in shown
    # report draws the loss at every step the trainer logged
    ok(f"invoke report --out {tmp_path / 'report.html'}", config)
    assert "training loss at each step the trainer logged" in (tmp_path / "report.html").read_text()


def test_a_runner_killed_mid_training_is_started_again_and_its_trainer_resumes(tmp_path):
    """The runner's death tells its trainer to stop (it saves and exits): the runner the watcher
    starts again waits for it to be gone, then resumes from the last checkpoint: never two
    trainers on one folder, never a start from scratch."""
    gate = tmp_path / "gate"
    gate.write_text("3")
    fast = {"backoff": 0.2, "max_restarts": 3, "window": 3600}
    config, root = train_job(tmp_path, recover=fast, STAND_IN_TRAINER_GATE=str(gate))
    hidden_states_made(config)
    ok("invoke restart --stage train", config)
    wait_for(lambda: train(root).get("step") == 3, what="three steps trained")
    runner, trainer = status(root)["pid"], read_json(Paths(root).trainer)["pid"]
    os.kill(runner, signal.SIGKILL)
    wait_for(lambda: status(root).get("pid") not in (None, runner), what="a runner started again")
    wait_for(lambda: not procinfo.alive(trainer), what="the old trainer gone")
    gate.write_text("1000")
    ok("invoke tail", config)
    log = Paths(root).trainer_log.read_text()
    assert status(root)["state"] == "finished"
    assert log.count("No previous training checkpoint found") == 1 and "Resuming" in log
    assert (Paths(root).trained_draft / "config.json").is_file()


def test_a_silent_trainer_is_said_stalled_then_killed_as_hung_and_resumed(tmp_path):
    """A trainer that writes nothing (a stuck collective, say) is said stalled (status, notify),
    then killed as hung and started again from its last checkpoint, the restart told too."""
    gate, events = tmp_path / "gate", tmp_path / "events.log"
    gate.write_text("2")  # the trainer holds before its third step, silent: as a hung one is
    config, root = train_job(
        tmp_path,
        engine={"stall_minutes": 0.02},  # silent 1.2 s: stalled
        notify=events,
        STAND_IN_TRAINER_GATE=str(gate),
    )
    data = yaml.safe_load(config.read_text())
    data["job"]["train"]["hung_minutes"] = 0.04  # silent 2.4 s: hung
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    hidden_states_made(config)
    ok("invoke restart --stage train", config)
    wait_for(lambda: train(root).get("step") == 2, what="two steps trained")
    first = read_json(Paths(root).trainer)["pid"]
    notified = lambda: events.read_text() if events.exists() else ""  # noqa: E731
    wait_for(lambda: "stalled: the trainer wrote nothing" in notified(), what="stalled told")
    wait_for(lambda: "trainer_restarted" in notified(), what="the hung trainer's restart told")
    assert "the trainer ended (hung: it wrote nothing for" in notified()
    assert not procinfo.alive(first)  # killed, never left beside the next
    gate.write_text("1000")
    ok("invoke tail", config)
    st, log = status(root), Paths(root).trainer_log.read_text()
    assert st["state"] == "finished" and st["train"]["restarts"] >= 1 and not st["stalled"]
    assert log.count("No previous training checkpoint found") == 1 and "Resuming" in log


def test_the_gpus_the_trainer_holds_are_shown_while_it_trains(tmp_path, monkeypatch):
    """The stage asks no server, and its GPUs are sampled all the same (the watching every stage
    gets): status and tail say them."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\ncase "$*" in *query-gpu*) printf "0, 97, 70000, 81559\\n1, 96, 70001, 81559\\n";;'
        " esac\nexit 0\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    gate = tmp_path / "gate"
    gate.write_text("2")
    config, root = train_job(
        tmp_path, engine={"metrics_interval": 0.2}, STAND_IN_TRAINER_GATE=str(gate)
    )
    data = yaml.safe_load(config.read_text())
    data["job"]["train"]["gpus"] = 1  # the stand-in has no torch launcher
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    hidden_states_made(config)
    ok("invoke restart --stage train", config)
    wait_for(lambda: train(root).get("step") == 2, what="two steps trained")
    wait_for(lambda: status(root).get("gpus"), what="the GPUs sampled")
    assert "GPUs 2: util % 97 96" in ok("invoke status", config)
    gate.write_text("1000")
    ok("invoke tail", config)
    assert status(root)["state"] == "finished"


def test_a_trainer_that_fails_twice_the_same_way_is_given_up_with_its_own_line(tmp_path):
    config, root = train_job(tmp_path, STAND_IN_TRAINER_FAIL="1")
    hidden_states_made(config)
    ok("invoke restart --stage train", config)
    res = typed("invoke tail", config)
    st = status(root)
    assert st["state"] == "failed", res.stdout
    assert "the trainer failed twice the same way" in st["message"]
    assert "RuntimeError: stand-in trainer: step 1 fails" in st["message"]


def test_the_host_installs_the_trainer_into_a_venv_of_its_own_once(tmp_path):
    """No job.train.python: the host makes a venv under <remote_dir>/venvs/ and pip-installs
    job.train.trainer there (a wheel here: no index needed), once; the next training uses it."""
    config, root = train_job(tmp_path)
    data = yaml.safe_load(config.read_text())
    del data["job"]["train"]["python"]
    data["job"]["train"]["trainer"] = wheel = str(stand_in_wheel(tmp_path))
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    hidden_states_made(config)
    ok("invoke restart --stage train", config)
    ok("invoke tail", config)
    assert status(root)["state"] == "finished", status(root)["message"]
    venvs = list(Paths(root).trainer_venvs.iterdir())
    assert [p.name for p in venvs] == [venv_name(wheel)]
    assert (venvs[0] / ".installed").is_file() and (venvs[0] / "bin" / "python").exists()
    ok("invoke restart --stage train --force", config)  # trains anew: installs nothing
    ok("invoke tail", config)
    log = Paths(root).trainer_log.read_text()
    assert status(root)["state"] == "finished" and log.count("-m pip install") == 1
    assert log.count(f"{venvs[0]}/bin/python -m speculators.train") == 2


def test_the_simulated_engines_rows_are_never_trained_with_a_trainer_installed_for_them(tmp_path):
    """The `local` host's simulated engine with the default trainer: refused in one line, before
    the install of speculators and torch (gigabytes) starts."""
    config, root = train_job(tmp_path)
    data = yaml.safe_load(config.read_text())
    del data["job"]["train"]["python"]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    hidden_states_made(config)
    res = typed("invoke restart --stage train", config)
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "simulated engine's rows are stand-ins" in out, out
    assert not Paths(root).trainer_venvs.exists() and status(root)["stage"] == "hidden-states"


def test_no_job_train_is_refused_before_any_host_is_touched(tmp_path):
    config, root = train_job(tmp_path)
    data = yaml.safe_load(config.read_text())
    del data["job"]["train"]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    res = typed("invoke restart --stage train", config)
    assert res.returncode == 2 and "hosts.yaml has no job.train" in res.stderr + res.stdout
    assert not root.exists()


def test_from_the_answers_to_the_trained_draft_measured_with_nobody_at_the_keyboard(tmp_path):
    """The job's own server (the stand-in vLLM): the answers, their hidden states, then `restart
    --stage train --baseline` stops the server (the trainer holds the GPUs), trains, and the
    watcher measures the draft it made, then the baseline: one command from rows to a measured
    draft."""
    port = free_port()
    config, root = train_job(tmp_path, recover=None)
    data = yaml.safe_load(config.read_text())
    data["job"]["engine"] = {
        "kind": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": "kimi", "concurrency": 2
    }  # fmt: skip
    del data["job"]["train"]["target_layers"]  # server.hidden_states.layers but the last: [1]
    data["server"] = {
        "command": str(fake_vllm(tmp_path)),
        "model": "kimi",
        "port": port,
        "args": ["--fake-delay", "0.05", "--fake-accept", "of B1=2"],
        "ready_timeout": 120,
        "hidden_states": {"layers": [1, 3]},
        "draft": {"model": "trained", "num_speculative_tokens": 3, "eval_samples": 2},
    }
    del data["recover"]
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        for line in ("invoke deploy", "invoke restart --max-samples 3", "invoke tail"):
            ok(line, config)
        ok("invoke restart --stage hidden-states", config)
        ok("invoke tail", config)
        serving = ServerRecord.live(Paths(root).server_pid)
        out = ok("invoke restart --stage train --baseline", config)
        assert "the server holds the GPUs the train stage needs: stopping it (the next" in out
        assert "then draft, then baseline (the watcher starts it)" in out
        # stopped (the draft's server the watcher starts once the training ends is another)
        assert serving is not None and not procinfo.alive(serving.pid)
        ok("invoke tail", config)
        st = status(root)
        assert (st["stage"], st["state"]) == ("baseline", "finished"), st["message"]
        served = json.loads((Paths(root).trained_draft / "config.json").read_text())
        assert served["transformer_layer_config"]["num_aux_hidden_states"] == 1
        measured = sorted(p.name for p in Paths(root).drafts.iterdir() if p.is_dir())
        assert any(m.startswith("trained-") for m in measured), measured
        report = tmp_path / "report.html"
        ok(f"invoke report --out {report}", config)
        page = report.read_text()
        assert "trained" in page and "baseline" in page
    finally:
        typed("invoke stop", config)
        typed("invoke server.stop", config)
