"""How a stage asks a server for one item (a row's hidden states, a held-out prompt's answer): the
same way for every stage. A job fault stops the job; a refusal fails the item (asked again by the
next restart); an engine down, stuck or slow is asked again after a backoff, the item failing past
`engine.max_retries` unless the engine is down (the watcher brings a dead server back; the job
fails once every server has been down for `engine.down_deadline`, as the answers' does). Each try
is the pool's to count on its server: in flight, answered, stuck, down, up again (the runner's
alerts and the status read the pool, for every stage alike)."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from ..engine.client import (
    EngineDown,
    EngineError,
    JobFault,
    PermanentError,
    Stuck,
    TransientError,
    backoff,
)
from ..engine.pool import Endpoint


class AskAgain(Exception):
    """A try went wrong in a way a new try may mend (a file the server wrote bad)."""


async def ask(
    stage, item: str, once: Callable[[int], Awaitable[int]], counts, ep: Endpoint | None = None
) -> None:
    """`once(tries)` asks `ep`'s server for the item, keeps what comes back and says its tokens;
    `stage` has the job, the log, its pool and its engine_error, fatal and retries; an item failed
    is one more of `counts.failed`."""
    eng, tries, pool = stage.job.engine, 0, stage.pool if ep is not None else None
    while True:
        if ep is not None:
            ep.in_flight += 1
        try:
            tokens = await once(tries)
            stage.engine_error = None
            stage.made_at = now = time.time()
            if pool is not None:
                pool.mark_up(ep, now)
                pool.answered(ep, tokens or 0, now)
            return
        except AskAgain:
            pass
        except JobFault as e:  # every item would get the same answer
            stage.engine_error = stage.fatal = str(e)
            return
        except PermanentError as e:
            stage.engine_error = str(e)
            counts.failed += 1
            _errors(ep)
            stage.log(f"{item}: {e}: left for the next restart")
            return
        except EngineError as e:  # down, stuck, timed out: the watcher replaces a dead server
            stage.engine_error = str(e)
            stage.retries += 1
            if pool is not None and isinstance(e, EngineDown):
                pool.mark_down(ep, str(e), time.time())
                gone = pool.gone_too_long(time.time(), eng.down_deadline, stage.recovering_at())
                if gone:
                    stage.fatal = stage.fatal or f"{gone}: {e}"
                    return
            elif pool is not None and isinstance(e, Stuck):
                pool.stuck(ep, time.time())
            elif isinstance(e, TransientError):
                _errors(ep)
            if not isinstance(e, EngineDown) and tries >= eng.max_retries:
                counts.failed += 1
                stage.log(f"{item}: {e}: {tries} retries, left for the next restart")
                return
        finally:
            if ep is not None:
                ep.in_flight -= 1
        tries += 1
        await _backoff(backoff(min(tries, 6), eng.retry_base), ep, stage)


def _errors(ep: Endpoint | None) -> None:
    if ep is not None:
        ep.errors += 1


async def _backoff(seconds: float, ep: Endpoint | None, stage) -> None:
    """The wait before the next try, cut short when its server, down, answers again (the pool's
    probe, or a server the watcher started again) or the stage stops."""
    was_down = ep is not None and not ep.reachable
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stage.stop.asked and stage.fatal is None:
        if was_down and ep.reachable:
            return
        await asyncio.sleep(min(0.25, max(0.0, end - time.monotonic())))
