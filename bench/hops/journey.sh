#!/bin/sh
# bench/hops/journey.sh NAME <deploytool args...>: one laptop command under the hop counter, from
# the scratch project $HOPS_WORK/proj (made by run_all.sh); its counts (laptop, each
# `remote --request`) land in $HOPS_WORK/out/NAME; a runner started by it writes there too.
# Then summarise.py prints the table.
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
WORK=${HOPS_WORK:-/tmp/deploytool-hops}
name=$1; shift
export HOPS_WORK="$WORK" PYTHONPATH="$HERE/site" HOPS_OUT="$WORK/out/$name"
mkdir -p "$HOPS_OUT"
date +%s.%N > "$HOPS_OUT/t_begin"
cd "$WORK/proj" && "$REPO/.venv/bin/python" "$HERE/laptop.py" --config hosts.yaml "$@"
echo "exit $?"
