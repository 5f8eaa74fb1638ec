"""plan: caps that reach a token target per dataset, with the ETA at the measured throughput."""

from __future__ import annotations

from remote.common.answers import PlanAnswer, plan_etas
from remote.common.caps import parse_tokens
from remote.common.jobspec import ServerSpec
from remote.common.protocol import CtlPlan

from ..connectors import Connector
from ..errors import UsageError
from .control import call


def parse_plan_args(tokens_per_dataset: str, tokens_per_s: str | None) -> tuple[int, float | None]:
    def parsed(flag: str, text: str) -> int:
        try:
            return parse_tokens(text)
        except ValueError as e:
            if str(text).strip().startswith("-"):
                return -1  # a count below zero: said below as 0 is, positive
            raise UsageError(f"{flag}: {e}") from None

    target = parsed("--tokens-per-dataset", tokens_per_dataset)
    rate = float(parsed("--tokens-per-s", tokens_per_s)) if tokens_per_s is not None else None
    if target <= 0:
        raise UsageError(
            f"--tokens-per-dataset: expected a positive token count, got {tokens_per_dataset}: "
            "`invoke plan --tokens-per-dataset 10M`"
        )
    if rate is not None and rate <= 0:
        raise UsageError(
            f"--tokens-per-s: expected a positive token count, got {tokens_per_s}; leave it out "
            "to plan at the job's measured speed"
        )
    return target, rate


def plan_host(
    conn: Connector, tokens_per_dataset: int, tokens_per_s: float | None, spec: ServerSpec
) -> PlanAnswer:
    # only what sizes the stage: the server's env (its keys) stays off the host's command line
    sizing = ServerSpec(model=spec.model, hidden_states=spec.hidden_states)
    answer = call(conn, CtlPlan(tokens_per_dataset=tokens_per_dataset, spec=sizing))
    rate = tokens_per_s or answer.tokens_per_s or None
    rate_source = "--tokens-per-s" if tokens_per_s else (answer.rate_basis or None)
    rows = answer.datasets
    if tokens_per_s:  # the host reckoned them at its own rate
        plan_etas(rows, tokens_per_s)
    return PlanAnswer(
        conn.name, tokens_per_dataset, rows, rate, rate_source, answer.stage, answer.max_tokens
    )
