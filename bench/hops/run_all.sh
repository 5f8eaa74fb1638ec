#!/usr/bin/env bash
# Hop counts of two deploytool command journeys: how many product function calls (code in the
# repository's deploytool/ and remote/, or in the release deployed on the scratch host) each
# process makes, counted with sys.setprofile (tracer.py).
#   journey 1 (j1): `restart --cap B3=5` on a running job: the live re-cap, including the runner's
#                   window from taking the control request until B3's new target is set
#   journey 2 (j2): `restart --stage hidden-states` after the job finished: the new stage's runner,
#                   counted from its first call until it writes status `running`
# Run from anywhere: `bash bench/hops/run_all.sh` (under a minute). All state goes to
# ${HOPS_WORK:-/tmp/deploytool-hops}: proj/ (a scratch project made here: host `box`, connect: local,
# python: pywrap.sh; B1-B3 x 400 prompts; simulate engine), host/ (its remote_dir), out/j1, out/j2
# (one JSON per traced process part; out/setup and out/finish hold the untraced-journey steps).
# The job is stopped at the end, also when a step fails.
#
# Reading the tables (summarise.py DIR; its docstring has the column key): one row per process
# part in time order: laptop-* is the laptop command (`answered`: calls until the host's last
# answer), request-* each `python -m remote --request` on the host (its command shown), runner-*
# the runner's window (main thread; housekeeping / tail / other threads apart). `calls` are hops;
# comp / imp / wait say how many of them are comprehension bodies, import-time calls, and turns
# of a host polling loop (runner_process.recap / _wait_running). The last line sums a journey.
# The polling counts (`wait`, and the calls of the rows holding them) vary from run to run: they
# depend on how soon the runner answers; the other counts should repeat.
#
# Files: tracer.py (the counter), laptop.py (the laptop command under it), pywrap.sh + boot.py
# (the host's `python:`; runs `python -S -m remote --request` under it; -S skips site, so
# sitecustomize cannot reach those), site/sitecustomize.py (on PYTHONPATH: the runner's windows),
# journey.sh NAME ARGS (one traced laptop command into out/NAME), summarise.py (the tables).
set -e
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PY="$REPO/.venv/bin/python"
mkdir -p "${HOPS_WORK:-/tmp/deploytool-hops}"
WORK=$(cd "${HOPS_WORK:-/tmp/deploytool-hops}" && pwd)
export HOPS_WORK="$WORK" PYTHONPATH="$HERE/site"
DT="$PY -m deploytool --config hosts.yaml"

# the scratch project
mkdir -p "$WORK/proj/data/prompts"
cat > "$WORK/proj/hosts.yaml" <<YAML
default_host: box
hosts:
  box:
    connect: local
    remote_dir: $WORK/host
    python: $HERE/pywrap.sh
job:
  datasets:
    B1:
      prompts: data/prompts/B1.jsonl
      est_tokens: 100
    B2:
      prompts: data/prompts/B2.jsonl
      est_tokens: 100
    B3:
      prompts: data/prompts/B3.jsonl
      est_tokens: 100
  engine:
    kind: simulate
    concurrency: 4
    tokens_per_s: 100
  extra_body:
    return_token_ids: true
  sampling:
    max_tokens: 110
recover: false
YAML
"$PY" - "$WORK/proj/data/prompts" <<'PYTHON'
import json, sys
for ds in ("B1", "B2", "B3"):
    with open(f"{sys.argv[1]}/{ds}.jsonl", "w") as f:
        for i in range(400):
            msg = {"role": "user", "content": f"question {i} of {ds}"}
            f.write(json.dumps({"id": f"{ds}-{i:06d}", "messages": [msg]}) + "\n")
PYTHON

cd "$WORK/proj"
stopped=
stop_job() { [ -n "$stopped" ] || HOPS_OUT="$WORK/out/finish" $DT stop --grace 0 >/dev/null 2>&1 || true; }
trap stop_job EXIT
HOPS_OUT="$WORK/out/setup" $DT stop --grace 0 >/dev/null 2>&1 || true  # a job left by a failed run
rm -rf "$WORK/host" "$WORK/out"
mkdir -p "$WORK/out/setup" "$WORK/out/finish"
export HOPS_OUT="$WORK/out/setup"  # the runner started here writes its windows here
$DT deploy | head -1
$DT restart --max-samples 300 | head -1
sleep 3
"$HERE/journey.sh" j1 restart --cap B3=5  # journey 1: live re-cap
for _ in $(seq 100); do
  ls "$WORK"/out/setup/runner-*-recap-1.json >/dev/null 2>&1 && break
  sleep 0.2
done
cp "$WORK"/out/setup/runner-*-recap-1.json "$WORK/out/j1/"
HOPS_OUT="$WORK/out/finish" $DT restart --max-samples 2 | head -1  # let the job finish
for _ in $(seq 120); do
  $DT status --json | "$PY" -c 'import json,sys; sys.exit(json.load(sys.stdin)["box"]["state"] != "finished")' && break
  sleep 1
done
"$HERE/journey.sh" j2 restart --stage hidden-states  # journey 2: new stage's runner
sleep 2
HOPS_OUT="$WORK/out/finish" $DT stop --grace 0 | head -1
stopped=1
for j in j1 j2; do
  echo "== $j"
  "$PY" "$HERE/summarise.py" "$WORK/out/$j"
done
