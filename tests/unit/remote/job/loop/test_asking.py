"""One item asked the way every stage asks: a job fault stops the job, a refusal fails the item, a
slow or stuck engine is asked again after a backoff until max_retries, a try that says so again;
each try counted on its server in the pool."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from remote.common.jobspec import EngineSpec
from remote.job.engine.client import EngineDown, JobFault, PermanentError, Stuck, TransientError
from remote.job.engine.pool import Pool
from remote.job.loop.asking import AskAgain, ask


def stage(max_retries=2, down_deadline=1800.0):
    logged = []
    eng = EngineSpec(max_retries=max_retries, retry_base=0.0, down_deadline=down_deadline)
    st = SimpleNamespace(job=SimpleNamespace(engine=eng), log=logged.append)
    st.stop, st.recovering_at = SimpleNamespace(asked=False), lambda: 0.0
    st.engine_error, st.fatal, st.retries, st.logged = None, None, 0, logged
    return st


def run(st, errors: list) -> tuple[list[int], int]:
    tries, counts = [], SimpleNamespace(failed=0)

    async def once(n: int) -> None:
        tries.append(n)
        if errors:
            raise errors.pop(0)

    asyncio.run(ask(st, "B1: p0", once, counts))
    return tries, counts.failed


def test_each_answer_of_the_engine_has_its_one_way():
    st = stage()
    assert run(st, [TransientError("slow"), AskAgain()]) == ([0, 1, 2], 0)
    assert st.engine_error is None and st.retries == 1
    st = stage(max_retries=1)
    assert run(st, [TransientError("slow")] * 5) == ([0, 1], 1)
    assert st.logged == ["B1: p0: slow: 1 retries, left for the next restart"]
    st = stage(max_retries=1)  # a bad answer each time (a file the server wrote bad)
    assert run(st, [AskAgain()] * 5) == ([0, 1], 1)
    assert st.logged == ["B1: p0: a bad answer: 1 retries, left for the next restart"]
    st = stage()
    assert run(st, [PermanentError("bad request", 400)]) == ([0], 1) and st.fatal is None
    st = stage()
    assert run(st, [JobFault("no files", 404)]) == ([0], 0) and st.fatal == "no files"


def test_each_try_is_counted_on_its_server_in_the_pool():
    """Down: not asked again until its server answers again (the pool's probe), then at once;
    stuck: sent again at once. What the runner's alerts (engine_down, engine_up) and the status's
    servers read, for every stage that asks."""
    st = stage()
    st.pool = Pool(["http://a", "http://b"], 2, 0.0, st.logged.append)
    a, b = st.pool.endpoints
    tries, counts, seen = [], SimpleNamespace(failed=0), []

    async def once(n: int) -> int:
        tries.append(n)
        seen.append(a.reachable)
        if n == 0:
            raise EngineDown("connection refused")
        if n == 1:
            raise Stuck("no token for 300s")
        return 42

    async def probe() -> None:  # the pool's probe: the server answers again, a while later
        while a.reachable:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.6)
        assert tries == [0]  # never asked while down
        st.pool.mark_up(a, 1.0)

    async def both() -> None:
        await asyncio.gather(ask(st, "B1: p0", once, counts, a), probe())

    asyncio.run(both())
    assert tries == [0, 1, 2] and seen == [True, True, True] and counts.failed == 0
    assert a.reachable and a.requests == 1 and a.stuck == 1 and a.last_error
    assert a.in_flight == 0  # counted while each try was at the server, never while it waited
    assert b.requests == 0 and st.pool.all_down_since() is None
    assert any("unreachable" in line for line in st.logged)


def test_an_item_its_server_goes_away_under_too_often_fails_alone():
    st = stage(max_retries=2)  # max_requeues: 16
    st.pool = Pool(["http://a"], 2, 0.0, st.logged.append)
    counts = SimpleNamespace(failed=0)

    async def once(n: int) -> int:
        raise Stuck("no token for 300s")

    asyncio.run(ask(st, "B1: p0", once, counts, st.pool.endpoints[0]))
    assert counts.failed == 1 and st.fatal is None and st.pool.endpoints[0].stuck == 17
    assert "went away under it 17 times" in st.logged[-1]


def test_every_server_down_past_the_deadline_fails_the_job_as_the_answers_do():
    st = stage(down_deadline=0.0)
    st.pool = Pool(["http://a"], 2, 0.0, st.logged.append)
    (a,) = st.pool.endpoints
    counts = SimpleNamespace(failed=0)

    async def once(n: int) -> int:
        raise EngineDown("connection refused")

    asyncio.run(ask(st, "B1: p0", once, counts, a))
    assert st.fatal.startswith("engine unreachable for ") and "connection refused" in st.fatal
    assert counts.failed == 0 and a.in_flight == 0
