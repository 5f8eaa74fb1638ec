#!/bin/sh
# hosts.yaml `python:` for the scratch host: `python -S -m remote ...` (the request processes) run
# under boot.py (the hop counter) when HOPS_OUT is set; anything else is the repo venv's python.
HERE=$(cd "$(dirname "$0")" && pwd)
PY="$HERE/../../.venv/bin/python"
if [ -n "$HOPS_OUT" ] && [ "$1" = "-S" ] && [ "$2" = "-m" ] && [ "$3" = "remote" ]; then
  shift 3
  exec "$PY" -S "$HERE/boot.py" "$@"
fi
exec "$PY" "$@"
