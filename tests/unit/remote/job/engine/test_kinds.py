"""Which engine a job's `engine.kind` gets."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from remote.job.engine.kinds import make_engine
from remote.job.engine.simulate import SimulateEngine


def test_simulate_is_the_stand_in_and_an_unknown_kind_is_named():
    job = SimpleNamespace(
        engine=SimpleNamespace(kind="simulate", tokens_per_s=10.0, concurrency=2),
        sampling={},
        chat_template_kwargs={},
        extra_body={},
    )
    assert isinstance(make_engine(job), SimulateEngine)
    job.engine.kind = "tgi"
    with pytest.raises(ValueError, match="unknown engine kind 'tgi'"):
        make_engine(job)
