#!/usr/bin/env bash
# Everything a fresh machine needs: OpenSSH (the tests start a real sshd) and a venv with the package.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ] || ! command -v ssh-keygen >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >/dev/null
  else
    echo "error: OpenSSH server is missing: run 'sudo apt-get install -y openssh-server' and retry" >&2
    exit 1
  fi
fi
# one set-up at a time in this checkout: the test commands each run this script, and two pip
# installs into one venv at once (both tiers started together) break each other's files
exec 9<"$0"
flock 9
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# the package is installed editable: only a change of pyproject.toml (its dependencies, its commands)
# needs pip again, so a venv that installed this very pyproject.toml is not asked twice. The job
# needs the package alone; `setup.sh dev` (the test and lint commands) adds pytest, hypothesis, ruff
EXTRAS=remote
[ "${1:-}" = dev ] && EXTRAS=dev,remote
STAMP=.venv/.installed-pyproject
WANT="$(sha256sum pyproject.toml | cut -d' ' -f1)"
HAVE="" HAVE_EXTRAS=""
[ -f "$STAMP" ] && read -r HAVE HAVE_EXTRAS < "$STAMP"
if [ "$HAVE" != "$WANT" ] || [ ! -x .venv/bin/invoke ] || { [ "$EXTRAS" = dev,remote ] && [ "$HAVE_EXTRAS" != dev,remote ]; }; then
  rm -f "$STAMP"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
  echo "$WANT $EXTRAS" > "$STAMP"
fi
