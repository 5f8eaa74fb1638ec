#!/usr/bin/env bash
# The linter and the formatter check, as CI runs them (ruff, configured in pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/ruff ] || bash scripts/setup.sh dev
.venv/bin/ruff check .
.venv/bin/ruff format --check .
