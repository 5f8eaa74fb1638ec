#!/usr/bin/env bash
# The test command: set up (sshd, venv, package) and run the whole suite. Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
# every process the tests start is a Python that imports this code: compiled once a run into a
# cache outside the tree (never into a release the tests deploy), not again by each of them
PYTHONPYCACHEPREFIX="$(mktemp -d "${TMPDIR:-/tmp}/deploytool-test-pycache.XXXXXX")"
export PYTHONPYCACHEPREFIX
trap 'rm -rf "$PYTHONPYCACHEPREFIX"' EXIT
unset PYTHONDONTWRITEBYTECODE
# compiled here once (and the test modules' assertions rewritten once), not by eight workers at once;
# a file that does not compile or collect is left for the run itself to report
.venv/bin/python -m compileall -q deploytool remote tests >/dev/null 2>&1 || true
# the cache is new each run, so the libraries' own modules are compiled again into it: once here,
# not by every runner and command that imports them first at the run's start
.venv/bin/python -c 'import aiohttp, fabric, paramiko, numpy, rich.live, rich.progress' \
  >/dev/null 2>&1 || true
.venv/bin/python -m pytest --collect-only -q -p no:cacheprovider >/dev/null 2>&1 || true
# the tests are independent and mostly wait on processes they start: eight at a time, even on two
# cores (DEPLOYTOOL_TEST_WORKERS=0 runs them one by one in this process); a worker with nothing
# left takes half of another's queue (worksteal), so the run does not end on one worker's share
.venv/bin/python -m pytest -n "${DEPLOYTOOL_TEST_WORKERS:-8}" --dist worksteal "$@"
