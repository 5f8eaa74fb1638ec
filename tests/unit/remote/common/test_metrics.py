"""vLLM's /metrics read into a batch job's few numbers: counts summed over data-parallel engines,
the KV cache averaged, a stale running gauge read as unknown."""

from __future__ import annotations

import pytest

from remote.common import metrics
from remote.common.metrics import between


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


def snap(gen=None, preempt=None, running=4, waiting=0, kv=0.5) -> dict:
    return {
        "generation_tokens": gen,
        "preemptions": preempt,
        "running": running,
        "waiting": waiting,
        "kv_cache": kv,
    }


def test_rates_come_from_the_snapshot_before():
    first = between(snap(gen=1000.0, preempt=2.0), now=10.0, last=None, before=None)
    assert first.generation_tokens_per_s is None and first.new_preemptions is None
    second = between(snap(gen=1500.0, preempt=5.0), 15.0, (10.0, snap(1000.0, 2.0)), first)
    assert (second.generation_tokens_per_s, second.new_preemptions) == (100.0, 3)
    restarted = between(snap(gen=10.0, preempt=0.0), 20.0, (15.0, snap(1500.0, 5.0)), second)
    assert (restarted.generation_tokens_per_s, restarted.new_preemptions) == (
        0.0,
        0,
    )  # a new server


def test_room_to_spare_is_counted_in_a_row_and_broken_by_a_queue_or_a_full_cache():
    m = None
    for _ in range(3):
        m = between(snap(), 0.0, None, m)
    assert m.room_samples == 3
    assert between(snap(waiting=1), 0.0, None, m).room_samples == 0
    assert between(snap(kv=0.95), 0.0, None, m).room_samples == 0
    assert between(snap(kv=None), 0.0, None, m).room_samples == 0  # cannot tell: no room


def test_gauges_that_say_nothing_runs_while_tokens_are_made_are_unknown():
    """Seen on vLLM's CPU build with a job of 16 in flight: running 0, waiting 0, 500 tok/s."""
    stale = between(snap(gen=1500.0, running=0), 11.0, (10.0, snap(gen=1000.0)), None)
    assert (stale.running, stale.waiting, stale.generation_tokens_per_s) == (None, None, 500.0)
    assert stale.room_samples == 0  # no room can be read from gauges that say nothing
    idle = between(snap(gen=1000.0, running=0), 11.0, (10.0, snap(gen=1000.0)), None)
    assert (idle.running, idle.waiting) == (0, 0)  # nothing made: an idle server, as it says
