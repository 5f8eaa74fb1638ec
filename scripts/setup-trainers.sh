#!/usr/bin/env bash
# The released trainers (SpecForge 0.2.0, speculators 0.9.0), for the real-engine tests that read our
# training files with their own code: installed without their dependencies (sglang, a pinned torch)
# into a folder of their own, put on PYTHONPATH by the tests only, never into the venv vLLM serves
# from. Usage: setup-trainers.sh VLLM_PYTHON; prints the folder on its last line.
set -euo pipefail
PY="$1"
VENV="$(dirname "$(dirname "$PY")")"
TAG="$("$PY" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
DIR="${DEPLOYTOOL_TRAINERS_DIR:-$HOME/.cache/deploytool/trainers-specforge-0.2.0-speculators-0.9.0-$TAG}"
check() { PYTHONPATH="$DIR" "$PY" -c 'import specforge.data.preprocessing, speculators.cli.prepare_data, datasets' "$@"; }
if ! check 2>/dev/null; then
  pip=("$PY" -m pip install -q --no-compile --disable-pip-version-check)
  "${pip[@]}" --no-deps --target "$DIR" specforge==0.2.0 speculators==0.9.0 hs-connectors==0.9.0 >&2
  # what their data code imports: into the rig's own venv (its only conflict is the rig's removal of
  # torchvision, said in setup-vllm.sh), or beside the trainers for a venv of the user's
  if [ -f "$VENV/.made-by-deploytool" ] || [ -f "$VENV/.rig-ready" ]; then
    "${pip[@]}" --no-warn-conflicts "datasets>=4.0.0,<=5.1.0" >&2
  elif ! "$PY" -c 'import datasets' 2>/dev/null; then
    "${pip[@]}" --target "$DIR" "datasets>=4.0.0,<=5.1.0" >&2
  fi
  check >&2
fi
echo "$DIR"
