"""The engine a job's `engine.kind` names. Apart from client.py, which the stand-in builds on."""

from __future__ import annotations

from .client import Engine, OpenAIEngine
from .simulate import SimulateEngine

KINDS = {"openai": OpenAIEngine, "simulate": SimulateEngine}


def make_engine(job, keys: dict[str, str] | None = None) -> Engine:
    """`keys`: the API key of each server ({base url: key}), sent with every request to it."""
    kind = job.engine.kind
    if kind not in KINDS:
        raise ValueError(f"unknown engine kind {kind!r}")
    return OpenAIEngine(job, keys) if kind == "openai" else KINDS[kind](job)
