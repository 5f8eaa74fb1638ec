#!/usr/bin/env bash
# The test command: set up (sshd, venv, package) and run the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
