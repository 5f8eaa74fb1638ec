"""The trainer's command: the same on every start (so it resumes), the layers the rows hold but the
last, and the flags the stage relies on kept out of the extra ones."""

from __future__ import annotations

import pytest

from remote.job.train.command import aux_layers, target_layer_ids, trainer_argv


def argv(**overrides):
    kw = dict(verifier="/m/target", data="/r/data", save="/r/ckpt", target_layers=[2, 30, 58],
              epochs=3, lr=3e-4, total_seq_len=8192, draft_layers=1, draft_vocab=None,
              checkpoint_freq=0.25, extra=[])  # fmt: skip
    return trainer_argv("/venv/bin/python", **{**kw, **overrides})


def test_the_command_names_every_input_and_leaves_resume_on():
    a = argv()
    assert a[:3] == ["/venv/bin/python", "-m", "speculators.train"]
    flags = " ".join(a[3:])
    assert "--verifier-name-or-path /m/target --data-path /r/data --save-path /r/ckpt" in flags
    assert "--target-layer-ids 2 30 58 --num-layers 1 --epochs 3 --lr 0.0003" in flags
    assert "--total-seq-len 8192 --checkpoint-freq 0.25 --on-missing raise" in flags
    assert "resume" not in flags and "--draft-vocab-size" not in flags
    assert argv() == a  # the same on every start


def test_a_draft_vocab_and_extra_flags_go_last():
    a = argv(draft_vocab=32000, extra=["--seed", "7"], checkpoint_freq=1)
    assert a[-4:] == ["--draft-vocab-size", "32000", "--seed", "7"]
    assert a[a.index("--checkpoint-freq") + 1] == "1"


@pytest.mark.parametrize(
    "extra",
    [["--save-best"], ["--no-resume-from-checkpoint"], ["--max-steps", "9"], ["--epochs=4"]],
)
def test_flags_the_stage_relies_on_are_refused_in_extra(extra):
    with pytest.raises(ValueError, match=extra[0].split("=")[0]):
        argv(extra=extra)


def test_a_checkpoint_frequency_that_never_saves_the_last_epoch_is_refused():
    with pytest.raises(ValueError, match="never saves the last"):
        argv(epochs=3, checkpoint_freq=2)
    assert "--checkpoint-freq" in argv(epochs=4, checkpoint_freq=2)
    with pytest.raises(ValueError):
        argv(checkpoint_freq=1.5)
    with pytest.raises(ValueError):
        argv(checkpoint_freq=0)


def test_the_target_layers_are_the_kept_ones_but_the_last():
    assert target_layer_ids([2, 30, 58, 61]) == [2, 30, 58]  # the stage's default for 61 layers
    assert target_layer_ids([0, 1, 2]) == [0, 1]  # the tiny model's, as the real run took them
    assert aux_layers(target_layer_ids([0, 1, 2])) == 2
    with pytest.raises(ValueError):
        target_layer_ids([5])
    with pytest.raises(ValueError, match="final hidden state"):
        target_layer_ids([2, 61, 30])
