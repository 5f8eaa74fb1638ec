#!/usr/bin/env bash
# The test command: set up (sshd, venv, package) and run the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# the tests are independent and mostly wait on processes they start: eight at a time, even on two
# cores (DEPLOYTOOL_TEST_WORKERS=0 runs them one by one in this process)
exec .venv/bin/python -m pytest -n "${DEPLOYTOOL_TEST_WORKERS:-8}" "$@"
