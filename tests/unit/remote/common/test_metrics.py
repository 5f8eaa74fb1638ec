"""vLLM's /metrics read into a batch job's few numbers: counts summed over data-parallel engines,
the KV cache averaged, a stale running gauge read as unknown."""

from __future__ import annotations

import pytest

from remote.common import metrics


def test_metrics_sum_engines_and_average_the_kv_cache():
    text = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="kimi"} 3.0
vllm:num_requests_running{engine="1",model_name="kimi"} 5.0
vllm:num_requests_waiting{engine="0",model_name="kimi"} 1.0
vllm:num_requests_waiting{engine="1",model_name="kimi"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="kimi"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="kimi"} 0.7
vllm:generation_tokens_total{engine="0",model_name="kimi"} 1000.0
vllm:generation_tokens_total{engine="1",model_name="kimi"} 2500.0
"""
    m = metrics.snapshot(text)
    assert m["running"] == 8 and m["waiting"] == 1 and m["generation_tokens"] == 3500
    assert m["kv_cache"] == pytest.approx(0.6) and m["preemptions"] is None
    assert metrics.snapshot("not prometheus at all\n") == dict.fromkeys(m)


def test_a_stale_running_gauge_reads_unknown_not_an_empty_batch():
    text = 'vllm:num_requests_running{model_name="m",engine="0"} 0.0\n'
    stale = metrics.snapshot(text + 'vllm:num_requests_waiting{model_name="m",engine="0"} 5.0\n')
    assert stale["running"] is None and stale["waiting"] == 5
    idle = metrics.snapshot(text + 'vllm:num_requests_waiting{model_name="m",engine="0"} 0.0\n')
    assert idle["running"] == 0
