"""The dispatcher alone, against a scripted engine, two in-memory datasets and a writer that keeps
its lines: what becomes of each request (recorded, retried, requeued, filed, or the job's fault)."""

from __future__ import annotations

import asyncio

from remote.job.engine.client import EngineDown, PermanentError, TransientError, refused
from remote.job.engine.pool import Pool
from remote.job.loop.control_requests import StopState
from remote.job.loop.dispatcher import JOB_FAULT_STREAK, Dispatcher
from remote.job.store.ledger import PromptState
from tests.unit.fakes import ScriptedEngine, Writer, dataset, engine_spec, scheduler


def dispatcher(script=None, urls=("http://a",), n=(4, 4), concurrency=2, stop=None, **spec):
    runs = [dataset("B1", n[0]), dataset("B2", n[1])]
    engine = ScriptedEngine(urls, script)
    writer = Writer()
    lines: list[str] = []
    d = Dispatcher(
        engine,
        Pool(list(urls), concurrency, 0.0, lines.append),
        scheduler(*runs),
        writer,
        engine_spec(**spec),
        lines.append,
        stop,
    )
    d.lines = lines
    return d, runs


def run(d: Dispatcher) -> None:
    asyncio.run(asyncio.wait_for(d.window(), 10))


def test_every_prompt_recorded_once_over_two_servers():
    d, runs = dispatcher(urls=("http://a", "http://b"))
    run(d)
    assert sorted(d.writer.records) == sorted((r.spec.name, p) for r in runs for p in r.prompts.ids)
    assert {u for u, _ in d.engine.asked} == {"http://a", "http://b"}
    assert len(d.engine.asked) == 8 and d.fatal is None


def test_a_transient_error_is_retried_and_counted():
    d, runs = dispatcher({"B1-0": [TransientError("503")]})
    run(d)
    assert ("B1", "B1-0") in d.writer.records and d.retries == 1
    assert [k for _, k in d.engine.asked].count("B1-0") == 2


def test_too_many_transient_errors_file_the_prompt_and_the_job_goes_on():
    d, runs = dispatcher({"B1-0": [TransientError("503")] * 3}, max_retries=2)
    run(d)
    assert d.writer.errors == [("B1", "B1-0", "gave up after 3 attempts: 503")]
    assert runs[0].ledger.state("B1-0") == PromptState.FAILED and len(d.writer.records) == 7


def test_a_server_going_away_sends_its_request_to_the_other_one():
    d, runs = dispatcher({"B1-0": [EngineDown("refused")]}, urls=("http://a", "http://b"))
    run(d)
    down = [e for e in d.pool.endpoints if not e.reachable]
    assert len(down) == 1 and ("B1", "B1-0") in d.writer.records
    assert d.retries == 0 and len(d.writer.records) == 8  # a requeue is no retry of the prompt
    assert runs[0].ledger.requeues == {}  # forgotten once recorded


def test_the_same_refusal_for_many_prompts_is_the_jobs_fault_and_files_nothing():
    bad = {f"B1-{i}": [PermanentError("400: bad field", 400)] for i in range(JOB_FAULT_STREAK)}
    d, runs = dispatcher(bad, n=(JOB_FAULT_STREAK, 0), concurrency=1)
    run(d)
    assert d.fatal and "the same answer for 8 prompts in a row" in d.fatal
    assert d.writer.errors == [] and d.writer.records == []
    assert all(
        runs[0].ledger.state(p) == PromptState.NEW for p in runs[0].prompts.ids
    )  # asked on resume


def test_a_model_the_server_does_not_serve_fails_at_once_without_filing():
    d, runs = dispatcher({"B1-0": [refused("404: no such model", 404)]}, concurrency=1)
    run(d)
    assert d.fatal and "not a prompt" in d.fatal and d.writer.errors == []
    assert runs[0].ledger.state("B1-0") == "queued"


def test_a_server_that_asks_for_a_key_fails_the_job_at_once_with_the_fix():
    d, runs = dispatcher({"B1-0": [refused("HTTP 401: Unauthorized", 401)]}, concurrency=1)
    run(d)
    assert d.fatal and "HTTP 401" in d.fatal and "env.VLLM_API_KEY" in d.fatal
    assert d.writer.errors == [] and runs[0].ledger.state("B1-0") == "queued"


def test_one_prompts_own_fault_is_filed_once_the_streak_ends():
    d, runs = dispatcher({"B1-1": [PermanentError("400: too long", 400)]}, concurrency=1)
    run(d)
    assert d.writer.errors == [("B1", "B1-1", "400: too long")] and d.fatal is None
    assert len(d.writer.records) == 7


def test_a_stop_asked_before_the_window_sends_nothing():
    stop = StopState()
    stop.stop()
    d, runs = dispatcher(stop=stop)
    run(d)
    assert d.engine.asked == [] and d.writer.records == []


def test_a_drain_lets_in_flight_requests_finish_and_sends_no_more():
    d, runs = dispatcher(concurrency=2)

    async def go():
        d.engine.gate = asyncio.Event()
        window = asyncio.ensure_future(d.window())
        while len(d.engine.asked) < 2:
            await asyncio.sleep(0.01)
        d.stop.drain()
        d.engine.gate.set()
        await asyncio.wait_for(window, 5)

    asyncio.run(go())
    assert sorted(d.writer.records) == [("B1", "B1-0"), ("B1", "B1-1")]
    assert len(d.engine.asked) == 2


def test_every_server_down_past_the_deadline_fails_the_job():
    d, runs = dispatcher({"B1-0": [EngineDown("refused")]}, concurrency=1, down_deadline=0.0)
    run(d)
    assert d.fatal and d.fatal.startswith("engine unreachable") and "refused" in d.fatal
    assert runs[0].ledger.state("B1-0") == "queued"  # never lost


def test_each_request_is_timed_from_its_send_to_its_end_however_it_ends():
    """A rate's time is the time its answers were being made: every send opens a span its end
    closes, retried, moved to another server or filed, so a dataset with nothing in flight (a
    complete one) has a time that no longer grows."""
    script = {
        "B1-0": [TransientError("503")],
        "B1-1": [EngineDown("refused")],
        "B2-0": [TransientError("x")] * 3,
    }
    d, runs = dispatcher(script, urls=("http://a", "http://b"), max_retries=2)
    run(d)
    for a in (*(r.active for r in runs), d.writer.active):
        assert a.flying == 0 and a.since is None and a.seconds >= 0
    assert d.writer.active.seconds <= sum(r.active.seconds for r in runs)  # side by side: once
