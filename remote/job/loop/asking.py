"""How a stage asks a server for one item (a row's hidden states, a held-out prompt's answer), by
the rule the answers' window asks by (`client.next_try`): a job fault stops the job; a refusal
fails the item (asked again by the next restart); a slow engine, or a bad answer, is asked again
after a backoff; a server that goes away under it (down, or stuck on it) is asked again at once,
once it answers again (the pool's probe, or the watcher's server), and the job fails once every
server has been down for `engine.down_deadline`. Each try is the pool's to count on its server: in
flight, answered, stuck, down, up again (the runner's alerts and the status read the pool, for
every stage alike)."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable

from ..engine.client import EngineDown, EngineError, JobFault, PermanentError, Stuck, next_try
from ..engine.pool import Endpoint


class AskAgain(Exception):
    """A try went wrong in a way a new try may mend (a file the server wrote bad)."""


async def ask(
    stage, item: str, once: Callable[[int], Awaitable[int]], counts, ep: Endpoint | None = None
) -> None:
    """`once(tries)` asks `ep`'s server for the item, keeps what comes back and says its tokens;
    `stage` has the job, the log, its pool, stop and engine_error, fatal and retries; an item
    failed is one more of `counts.failed`."""
    eng, pool = stage.job.engine, stage.pool if ep is not None else None
    # tries: each request's own key; slow, went_away: the tries that went wrong, by next_try's kind
    tries = slow = went_away = 0
    while True:
        wait = None  # before the next try: None, at once, once its server answers again
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
        except JobFault as e:  # every item would get the same answer
            stage.engine_error = stage.fatal = str(e)
            return
        except PermanentError as e:
            stage.engine_error = str(e)
            counts.failed += 1
            _errors(ep)
            stage.log(f"{item}: {e}: left for the next restart")
            return
        except (EngineDown, Stuck) as e:  # not the item's try: asked again once its server is back
            stage.engine_error = str(e)
            went_away += 1
            _went_away(pool, ep, e)
            if next_try(e, went_away, eng) is None:  # it takes its server down, or hangs it
                counts.failed += 1
                stage.log(f"{item}: its server went away under it {went_away} times, last: {e}")
                return
        except (EngineError, AskAgain) as e:  # slow, timed out; a bad answer (its caller counts)
            if isinstance(e, EngineError):
                stage.engine_error = str(e)
                stage.retries += 1
                _errors(ep)
            slow += 1
            wait = next_try(e, slow, eng)
            if wait is None:
                counts.failed += 1
                why = str(e) or "a bad answer"
                stage.log(f"{item}: {why}: {slow - 1} retries, left for the next restart")
                return
        finally:
            if ep is not None:
                ep.in_flight -= 1
        tries += 1
        if wait is not None:  # a slow engine (or a bad answer): a backoff, longer each such try
            await pause(stage, wait)
        elif pool is not None and not ep.reachable:
            await _until_back(stage, pool, ep)
        if stage.fatal is not None or stage.stop.asked:  # asked again by the next runner
            return


def _went_away(pool, ep: Endpoint, e: EngineError) -> None:
    """As the pool counts it: its server down (probed until it answers) or stuck on it."""
    if pool is not None and isinstance(e, EngineDown):
        pool.mark_down(ep, str(e), time.time())
    elif pool is not None:
        pool.stuck(ep, time.time())


def _errors(ep: Endpoint | None) -> None:
    if ep is not None:
        ep.errors += 1


async def _until_back(stage, pool, ep: Endpoint) -> None:
    """Until `ep`'s server answers again (the pool probes it), the stage stops, or every server
    has been down too long (the job fails, as the answers' does)."""
    while not ep.reachable and not stage.stop.asked and stage.fatal is None:
        gone = pool.gone_too_long(
            time.time(), stage.job.engine.down_deadline, stage.recovering_at()
        )
        if gone:
            stage.fatal = f"{gone}: {ep.last_error}"
            return
        await asyncio.sleep(0.25)


async def pause(stage, seconds: float) -> None:
    """`seconds` waited out, or less where the stage stops or fails meanwhile."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stage.stop.asked and stage.fatal is None:
        await asyncio.sleep(min(0.25, max(0.0, end - time.monotonic())))
