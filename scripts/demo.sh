#!/usr/bin/env bash
# The main job on the built-in `local` host (no GPU, no SSH): set up, deploy, start with caps, watch.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
invoke deploy
invoke restart --max-samples "${MAX_SAMPLES:-24}"
invoke tail
echo
echo "records: .deploytool/local/data/outputs/B*.jsonl (each answer once; a second run has nothing left to do)"
echo "every prompt (32 per dataset): MAX_SAMPLES=32 bash scripts/demo.sh; from empty: .venv/bin/invoke stop && rm -r .deploytool/local first"
echo "  (the local host's folder: its releases, records and logs, all made by deploytool)"
