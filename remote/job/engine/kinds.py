"""The engine a job's `engine.kind` names. Apart from client.py, which the stand-in builds on."""

from __future__ import annotations

from .client import Engine, OpenAIEngine
from .simulate import SimulateEngine

KINDS = {"openai": OpenAIEngine, "simulate": SimulateEngine}


def make_engine(job) -> Engine:
    kind = job.engine.kind
    if kind not in KINDS:
        raise ValueError(f"unknown engine kind {kind!r}")
    return KINDS[kind](job)
