"""A server's own view from two /metrics snapshots: its token rate and new preemptions between them,
and how many samples in a row it had room to spare."""

from __future__ import annotations

from remote.job.observe.telemetry import endpoint_metrics


def snap(gen=None, preempt=None, running=4, waiting=0, kv=0.5) -> dict:
    return {
        "generation_tokens": gen,
        "preemptions": preempt,
        "running": running,
        "waiting": waiting,
        "kv_cache": kv,
    }


def test_rates_come_from_the_snapshot_before():
    first = endpoint_metrics(snap(gen=1000.0, preempt=2.0), now=10.0, last=None, before=None)
    assert first.generation_tokens_per_s is None and first.new_preemptions is None
    second = endpoint_metrics(snap(gen=1500.0, preempt=5.0), 15.0, (10.0, snap(1000.0, 2.0)), first)
    assert (second.generation_tokens_per_s, second.new_preemptions) == (100.0, 3)
    restarted = endpoint_metrics(
        snap(gen=10.0, preempt=0.0), 20.0, (15.0, snap(1500.0, 5.0)), second
    )
    assert (restarted.generation_tokens_per_s, restarted.new_preemptions) == (
        0.0,
        0,
    )  # a new server


def test_room_to_spare_is_counted_in_a_row_and_broken_by_a_queue_or_a_full_cache():
    m = None
    for _ in range(3):
        m = endpoint_metrics(snap(), 0.0, None, m)
    assert m.room_samples == 3
    assert endpoint_metrics(snap(waiting=1), 0.0, None, m).room_samples == 0
    assert endpoint_metrics(snap(kv=0.95), 0.0, None, m).room_samples == 0
    assert endpoint_metrics(snap(kv=None), 0.0, None, m).room_samples == 0  # cannot tell: no room
