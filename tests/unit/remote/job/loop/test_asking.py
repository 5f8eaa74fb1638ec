"""One item asked the way every stage asks: a job fault stops the job, a refusal fails the item, a
slow or stuck engine is asked again after a backoff until max_retries, a try that says so again."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from remote.common.jobspec import EngineSpec
from remote.job.engine.client import JobFault, PermanentError, TransientError
from remote.job.loop.asking import AskAgain, ask


def stage(max_retries=2):
    said = []
    eng = EngineSpec(max_retries=max_retries, retry_base=0.0)
    st = SimpleNamespace(job=SimpleNamespace(engine=eng), log=said.append)
    st.engine_error, st.fatal, st.retries, st.said = None, None, 0, said
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
    assert st.said == ["B1: p0: slow: 1 retries, left for the next restart"]
    st = stage()
    assert run(st, [PermanentError("bad request", 400)]) == ([0], 1) and st.fatal is None
    st = stage()
    assert run(st, [JobFault("no files", 404)]) == ([0], 0) and st.fatal == "no files"
