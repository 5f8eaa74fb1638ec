"""How far a dataset's token budget (`--max-tokens`) runs past itself, through the runner's own
Scheduler and DatasetRun, in simulated time: an answer of L tokens takes L/50 seconds, so short
answers come back first, as on vLLM; lengths are lognormal around a mean of 8,000 tokens; a window of
256 requests; est_tokens 8,000. Each row: the tokens recorded when the dataset ends (median and max
over 20 seeds), for the rule the runner has and for the old one (stop sending once the records reach
the budget).

    .venv/bin/python bench/bench_budget.py
"""

from __future__ import annotations

import heapq
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from remote.common.caps import Caps  # noqa: E402
from remote.job.store.datasets import DatasetRun  # noqa: E402
from tests.unit.fakes import dataset, scheduler  # noqa: E402

WINDOW, MEAN, EST, SEEDS = 256, 8000, 8000, 20


def ended_at(seed: int, budget: int, sigma: float) -> int:
    rnd = random.Random(seed)
    run = dataset("B1", 100_000, est_tokens=EST)
    s = scheduler(run)
    s.apply_caps(Caps(max_tokens=budget))
    mu = math.log(MEAN) - sigma * sigma / 2
    now, flying = 0.0, []
    while True:
        while len(flying) < WINDOW and (nxt := s.next_prompt(now)) is not None:
            _, p = nxt
            run.ledger.send(p.id)
            length = int(rnd.lognormvariate(mu, sigma))
            heapq.heappush(flying, (now + length / 50.0, p.index, length, p))
        if not flying:
            return run.tokens_in_target
        now, _, length, p = heapq.heappop(flying)
        run.ledger.answered(p.id)
        run.record_done(p, length)


def main() -> None:
    rule = DatasetRun.budget_spoken_for
    print(f"{'budget':>10} {'sigma':>5}  {'rule':<6} {'median':>10} {'max':>10}")
    for budget, sigma in ((60_000, 0.5), (60_000, 1.0), (60_000, 1.5), (10_000_000, 1.0)):
        for name, spoken in (("now", rule), ("before", DatasetRun.budget_reached)):
            DatasetRun.budget_spoken_for = spoken
            tokens = sorted(ended_at(seed, budget, sigma) for seed in range(SEEDS))
            print(
                f"{budget:>10,} {sigma:>5}  {name:<6} {tokens[SEEDS // 2]:>10,} {tokens[-1]:>10,}"
            )
    DatasetRun.budget_spoken_for = rule


if __name__ == "__main__":
    main()
