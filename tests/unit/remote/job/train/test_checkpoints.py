"""The save folder read back: where the trainer would resume, a save cut off, done, the best, and the
folder vLLM serves; then the stand-in trainer through a SIGTERM, a rerun and a failure."""

from __future__ import annotations

import json
import os
import signal

import pytest

from remote.job.train import checkpoints as ck
from tests.conftest import wait_for
from tests.helpers import train_data


def save_epoch(save, epoch, local_step, global_step, **extra):
    folder = save / str(epoch)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = {
        "eagle_aux_hidden_state_layer_ids": [0, 1],
        "transformer_layer_config": {"hidden_size": 8},
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    (folder / "model.safetensors").write_bytes(b"weights %d" % global_step)
    state = {"epoch": epoch, "local_step": local_step, "global_step": global_step}
    (folder / "training_state.json").write_text(json.dumps(state))
    for name, text in extra.items():
        (folder / name).write_text(text)
    return folder


def test_the_state_is_the_highest_real_epoch_folders(tmp_path):
    assert ck.TrainState.read(tmp_path / "none").folder is None
    save_epoch(tmp_path, 0, 0, 54)
    save_epoch(tmp_path, 1, 20, 74)
    (tmp_path / "interrupted").mkdir()
    (tmp_path / "7").symlink_to("1")
    (tmp_path / "epoch1_step20").symlink_to("1")
    s = ck.TrainState.read(tmp_path)
    assert (s.folder.name, s.epoch, s.local_step, s.global_step, s.torn) == ("1", 1, 20, 74, "")
    assert not s.end_of_epoch and ck.epochs_saved(tmp_path) == [0, 1]
    assert not ck.done(tmp_path, 2) and not ck.done(tmp_path, 1)
    save_epoch(tmp_path, 1, 0, 108)
    assert ck.done(tmp_path, 2) and not ck.done(tmp_path, 3)


def test_a_save_cut_off_is_torn_and_set_aside(tmp_path):
    save_epoch(tmp_path, 0, 0, 54)
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.safetensors").write_bytes(b"half")
    s = ck.TrainState.read(tmp_path)
    assert "missing" in s.torn and not ck.done(tmp_path, 2)
    assert ck.set_aside(tmp_path, s) is not None and not (tmp_path / "1").exists()
    assert ck.TrainState.read(tmp_path).epoch == 0 and ck.done(tmp_path, 1)
    folder = save_epoch(
        tmp_path, 1, 20, 74
    )  # a later save of the same epoch, cut after its weights
    later = (folder / "training_state.json").stat().st_mtime_ns + 10**9
    os.utime(folder / "model.safetensors", ns=(later, later))
    assert "newer than" in ck.TrainState.read(tmp_path).torn
    os.utime(folder / "model.safetensors", ns=(later - 2 * 10**9,) * 2)
    (folder / "training_state.json").write_text('{"epoch": 1, "local_')
    assert "cannot be read" in ck.TrainState.read(tmp_path).torn
    save_epoch(tmp_path, 1, 0, 108, **{"val_metrics.json": '{"loss_epoch": 0.5}'})
    assert ck.TrainState.read(tmp_path).torn == ""  # written after the state, by validation


def test_best_and_its_metrics(tmp_path):
    assert ck.best(tmp_path) is None
    save_epoch(
        tmp_path, 0, 0, 54, **{"val_metrics.json": '{"loss_epoch": 0.52, "full_acc_0_epoch": 1.0}'}
    )
    (tmp_path / "checkpoint_best").symlink_to("0", target_is_directory=True)
    assert ck.best(tmp_path) == (tmp_path / "0").resolve()
    assert ck.val_metrics(ck.best(tmp_path)) == {"loss_epoch": 0.52, "full_acc_0_epoch": 1.0}
    assert ck.val_metrics(tmp_path / "nowhere") == {}


def test_the_served_copy_has_the_aux_layers_and_replaces_an_older_whole(tmp_path):
    folder = save_epoch(tmp_path / "ckpt", 0, 0, 54)
    out = tmp_path / "serve" / "draft"
    assert ck.served_copy(folder, out, 2) == out
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["transformer_layer_config"] == {"hidden_size": 8, "num_aux_hidden_states": 2}
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    (folder / "model.safetensors").write_bytes(b"epoch 1")
    (out / "stale").write_text("x")
    ck.served_copy(folder, out, 2)
    assert (out / "model.safetensors").read_bytes() == b"epoch 1" and not (out / "stale").exists()
    assert sorted(p.name for p in out.parent.iterdir()) == ["draft"]
    with pytest.raises(ValueError, match="2 aux layers"):
        ck.served_copy(folder, out, 3)


def prepared(tmp_path, rows=10):
    folder = train_data.write_dataset(tmp_path / "hs", "B1", rows)
    assert (
        train_data.run_prepare(tmp_path, train_data.plan(tmp_path / "data", (folder, 1))).returncode
        == 0
    )
    return tmp_path / "data"


def test_the_stand_in_trainer_runs_resumes_after_sigterm_and_is_done(tmp_path):
    save, gate = tmp_path / "ckpt", tmp_path / "gate"
    args = train_data.trainer_args(prepared(tmp_path), save)
    gate.write_text("6")  # steps 0..5, then held before step 6
    proc = train_data.start_trainer(args, STAND_IN_TRAINER_GATE=str(gate))
    wait_for(lambda: ck.TrainState.read(save).local_step == 4, 20, 0.02, "the save at step 4")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "Interrupt checkpoint saved to" in out and (save / "interrupted").is_dir()
    assert not (save / "interrupted" / "training_state.json").exists()
    s = ck.TrainState.read(save)
    assert (s.epoch, s.local_step, s.global_step) == (0, 4, 4) and not ck.done(save, 2)
    run = train_data.run_trainer(args)
    assert run.returncode == 0, run.stderr
    assert "Resuming mid-epoch from epoch=0 local_step=4 global_step=4." in run.stdout
    assert "global_step=4 " in run.stdout and "global_step=3 " not in run.stdout
    assert ck.done(save, 2) and ck.best(save) == (save / "1").resolve()
    assert os.readlink(save / "epoch1_end") == "1" and ck.val_metrics(save / "1")["loss_epoch"] > 0
    again = train_data.run_trainer(args)
    assert again.returncode == 0 and "global_step=" not in again.stdout  # done: nothing to do


def test_the_stand_in_trainer_fails_the_same_way_at_the_step_named(tmp_path):
    args = train_data.trainer_args(prepared(tmp_path), tmp_path / "ckpt")
    for _ in range(2):
        run = train_data.run_trainer(args, STAND_IN_TRAINER_FAIL="5")
        assert run.returncode == 1
        assert (
            run.stderr.strip().splitlines()[-1].startswith("RuntimeError: stand-in trainer: step 5")
        )
    assert ck.TrainState.read(tmp_path / "ckpt").local_step == 4


def test_the_stand_in_trainer_fails_on_a_missing_file(tmp_path):
    data = prepared(tmp_path)
    os.unlink(data / "hidden_states" / "hs_2.safetensors")  # the trainer's own link gone
    run = train_data.run_trainer(train_data.trainer_args(data, tmp_path / "ckpt"))
    assert run.returncode == 1 and "Failed to load hidden states for sample 2." in run.stderr


def test_a_save_cut_off_goes_back_to_the_last_whole_copy_not_to_nothing(tmp_path):
    """The trainer rewrites an epoch's folder in place: a kill in the middle of a save tears the
    very folder the save before was in. The copy kept when that save was said whole takes its
    place."""
    import time

    save = tmp_path / "ckpt"
    folder = save / "0"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"step 10")
    (folder / ck.STATE).write_text(json.dumps({"epoch": 0, "local_step": 10, "global_step": 10}))
    assert ck.keep_whole(save, folder)
    time.sleep(0.01)  # a later save's file is newer than the state it never reached
    (folder / "model.safetensors").write_bytes(b"step 15, half")
    os.utime(folder / "model.safetensors")
    state = ck.TrainState.read(save)
    assert state.torn
    ck.set_aside(save, state)
    again = ck.TrainState.read(save)
    assert (again.torn, again.local_step) == ("", 10)
    assert (save / "0" / "model.safetensors").read_bytes() == b"step 10"
    assert not (save / ".whole.partial").exists()
