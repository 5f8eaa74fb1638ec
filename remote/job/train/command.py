"""The command that runs speculators' offline EAGLE-3 trainer on the prepared data, the same on
every start: the trainer resumes by itself from the save folder (resume is its default), so the
identical command after a kill goes on where the last checkpoint left off.

The layers: the hidden-states stage keeps `[2, L/2, L-3, L]` (or the layers hosts.yaml names), the
last being the final hidden state, which the trainer reads as the target's own (it takes the
file's layers but the last as the draft's inputs). So the trainer's `--target-layer-ids` are the
kept layers without the last, in order: vLLM, serving the draft, takes the target's hidden states
at exactly these ids, and the draft's config counts them (`num_aux_hidden_states`)."""

from __future__ import annotations

# flags whose effect the stage relies on being the trainer's default, or sets itself
OWNED = {
    "--verifier-name-or-path", "--data-path", "--save-path", "--target-layer-ids", "--num-layers",
    "--epochs", "--lr", "--total-seq-len", "--checkpoint-freq", "--draft-vocab-size", "--on-missing",
    "--train-data-ratio",  # prepare's: where the held-out rows begin
    "--no-resume-from-checkpoint",  # resume is how a restart goes on
    "--save-best",  # it keeps only the best epoch's folder and no mid-epoch saves: nothing to resume
    "--max-steps",  # a run cut short that the save folder would call unfinished forever
    "--dry-run", "--config",
}  # fmt: skip


def target_layer_ids(kept: list[int]) -> list[int]:
    """The trainer's `--target-layer-ids` for rows whose files hold these layers, in order."""
    kept = [int(x) for x in kept]
    if len(kept) < 2:
        raise ValueError(f"the rows hold layers {kept}: the trainer needs aux layers and the last")
    if kept[-1] != max(kept):
        raise ValueError(
            f"the rows' last layer {kept[-1]} is not the final hidden state {max(kept)}"
        )
    return kept[:-1]


def venv_name(requirement: str) -> str:
    """The host's venv folder for a trainer requirement: readable, and another for each one."""
    import hashlib
    import re

    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", requirement).strip("-.")[:40] or "trainer"
    return f"trainer-{slug}-{hashlib.sha256(requirement.encode()).hexdigest()[:8]}"


def aux_layers(target_layers: list[int]) -> int:
    """The draft's aux hidden states, as the served config counts them."""
    return len(target_layers)


def check_checkpoint_freq(checkpoint_freq: float, epochs: int) -> None:
    """A frequency over 1 saves epoch E only when (E+1) is a multiple of it: the last epoch must be
    one, or the run is never seen done and a restart trains it again."""
    if checkpoint_freq <= 0:
        raise ValueError("checkpoint_freq must be > 0")
    if checkpoint_freq > 1:
        if not float(checkpoint_freq).is_integer():
            raise ValueError(f"checkpoint_freq {checkpoint_freq}: over 1 it counts whole epochs")
        if epochs > 1 and epochs % int(checkpoint_freq):
            raise ValueError(
                f"checkpoint_freq {int(checkpoint_freq)} never saves the last of {epochs} epochs"
            )


def trainer_argv(
    python: str,
    *,
    verifier: str,
    data: str,
    save: str,
    target_layers: list[int],
    epochs: int,
    lr: float,
    total_seq_len: int,
    draft_layers: int,
    draft_vocab: int | None,
    checkpoint_freq: float,
    extra: list[str],
    gpus: int = 1,
    train_ratio: float | None = None,
) -> list[str]:
    """`python -m speculators.train ...`, on `gpus` GPUs through torch's own launcher where more
    than one (one process a GPU, as speculators' docs run it); `extra` are flags of the trainer's
    own (none of OWNED)."""
    if epochs < 1 or draft_layers < 1 or total_seq_len < 1 or not target_layers:
        raise ValueError("epochs, draft_layers and total_seq_len must be >= 1, with target layers")
    check_checkpoint_freq(checkpoint_freq, epochs)
    clash = sorted({a.split("=", 1)[0] for a in extra} & OWNED)
    if clash:
        raise ValueError(f"the stage sets or relies on {', '.join(clash)}: not in extra args")
    argv = [python, "-m", "speculators.train", "--verifier-name-or-path", verifier]
    if gpus > 1:
        run = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus)]
        argv[1:1] = run
    argv += ["--data-path", data, "--save-path", save]
    argv += ["--target-layer-ids", *(str(int(x)) for x in target_layers)]
    argv += ["--num-layers", str(draft_layers), "--epochs", str(epochs), "--lr", repr(float(lr))]
    argv += ["--total-seq-len", str(total_seq_len), "--checkpoint-freq", _number(checkpoint_freq)]
    argv += ["--on-missing", "raise"]  # a missing file is an error here, never a vLLM request
    if draft_vocab is not None:
        argv += ["--draft-vocab-size", str(int(draft_vocab))]
    if train_ratio is not None:  # where the rows' training part ends (prepare's manifest)
        argv += ["--train-data-ratio", repr(float(train_ratio))]
    return argv + list(extra)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))
