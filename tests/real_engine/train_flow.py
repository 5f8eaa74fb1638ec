"""The train stage's flow as typed on real vLLM for CPUs, shared by tests/real_engine/test_real_train.py
and bench/bench_train_stage.py: a project of two datasets on a `local` host whose vLLM server
deploytool starts (the tiny model, its hidden states kept by the rig's CPU connector), the trainer
the job names (speculators 0.9.0 through the rig's CPU launcher), and the results the draft stage
leaves per draft."""

from __future__ import annotations

from pathlib import Path

from remote.common.codec import read_json
from remote.common.jobspec import Paths
from remote.common.status import DraftKept
from tests.conftest import free_port, write_prompts
from tests.helpers.as_typed import ok
from tests.real_engine import rig

HERE = Path(__file__).resolve().parent
DATASETS = ("B1", "B2")
LAYERS = [0, 1, 2]  # the tiny model's: its embedding's output, then each layer's (2 the last)


def trainer_python(where: Path, vllm_python: str) -> Path:
    """What job.train.python names: the vLLM environment's Python with the released trainers on its
    path (and whatever PYTHONPATH it is given: the runner's holds the release), the trainer itself
    (`-m speculators.train ARGS`) run through the CPU launcher with the same arguments (the released
    trainer assumes an accelerator without it)."""
    trainers = rig.trainers_env()["PYTHONPATH"]
    exe = where / "trainer-python"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(
        "#!/bin/sh\n"
        f'export PYTHONPATH="{trainers}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
        'if [ "$1" = "-m" ] && [ "$2" = "speculators.train" ]; then\n'
        f'  exec "{vllm_python}" "{HERE / "cpu_train_launch.py"}" "$@"\n'
        "fi\n"
        f'exec "{vllm_python}" "$@"\n'
    )
    exe.chmod(0o755)
    return exe


def project(
    where: Path, model: Path, vllm_python: str, rows: int, held: int, draft: dict
) -> tuple[Path, Path]:
    """hosts.yaml of the project (B1 and B2: `rows` prompts each to answer, `held` after them) and
    the host's remote_dir. Greedy answers of 12 tokens: the held-out answers walk the same words as
    the rows the draft is trained on. The server's hidden states are kept at LAYERS
    (server.hidden_states.layers: the train stage reads its target layers from there); one epoch at
    lr 0.005 of 128-token steps, a checkpoint every tenth of it; the watcher on (it starts the draft
    stage, then the baseline, once the training ends)."""
    proj, root, port = where / "p", where / "host", free_port()
    for ds in DATASETS:
        write_prompts(proj / "data" / "prompts" / f"{ds}.jsonl", rows + held, ds)
    train = {
        "python": str(trainer_python(where / "bin", vllm_python)),
        "epochs": 1,
        "lr": 0.005,
        "total_seq_len": 128,
        "checkpoint_freq": 0.1,
        "args": ["--num-workers", "0"],  # two cores: no spawned loader workers
    }
    cfg = rig.tiny_project(
        proj,
        root,
        port=port,
        python=vllm_python,
        vllm=rig.vllm_command(where / "bin", vllm_python),
        model=model,
        datasets=DATASETS,
        tokens=12,
        concurrency=8,
        job={"extra_body": {"return_token_ids": True}, "train": train},
        server={
            "env": {**rig.SERVER_ENV, "PYTHONPATH": str(HERE)},  # the CPU connector's module
            "hidden_states": {
                "layers": LAYERS,
                "connector": "CpuHiddenStatesConnector",
                "connector_module": "cpu_hidden_states_connector",
            },
            "draft": draft,
        },
    )
    return cfg.path, root


def hidden_states_made(config: Path, rows: int) -> None:
    """The answers, then their hidden states, as typed."""
    for line in (
        "invoke deploy",
        f"invoke restart --max-samples {rows}",
        "invoke tail",
        "invoke restart --stage hidden-states",
        "invoke tail",
    ):
        ok(line, config, timeout=900)


def results(root: Path, draft: str | None) -> Path:
    """The draft stage's results folder of the draft whose model's name is `draft` (`trained`, a
    folder's name), or of the baseline (None)."""
    found = []
    for p in Paths(root).drafts.iterdir():
        result = read_json(p / "draft.json") if p.is_dir() else None
        if result is None:
            continue
        if (result.get("baseline") and draft is None) or (
            not result.get("baseline") and draft is not None and Path(result["model"]).name == draft
        ):
            found.append(p)
    (folder,) = found
    return folder


def kept(folder: Path) -> dict[str, DraftKept]:
    """Each dataset's counts in a results folder."""
    return {ds: DraftKept.read(folder / f"{ds}.counts.json") for ds in DATASETS}
