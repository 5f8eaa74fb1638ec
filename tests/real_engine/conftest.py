"""Fixtures of the real-engine tier (run by scripts/test-real.sh; the everyday tier deselects it)."""

from __future__ import annotations

import pytest

from tests.real_engine import rig


@pytest.fixture(scope="session")
def vllm_python() -> str:
    try:
        return rig.vllm_python()
    except rig.NoVLLM as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, vllm_python):
    return rig.build_model(tmp_path_factory.mktemp("tiny-model"), vllm_python)


@pytest.fixture(scope="session")
def vllm_exe(tmp_path_factory, vllm_python):
    return rig.vllm_command(tmp_path_factory.mktemp("vllm-bin"), vllm_python)
