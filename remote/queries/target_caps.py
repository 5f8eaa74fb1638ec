"""Caps from a token target: per dataset, how many samples reach T tokens at the measured mean length."""

from __future__ import annotations

import time
from pathlib import Path

from ..common.answers import HostPlan, PlanRow, plan_etas
from ..common.caps import Caps, Target
from ..common.jobspec import JOB_FILE, MIN_MEASURED, JobSpec, Paths, release_dir
from ..common.protocol import CtlPlan
from ..common.speed import MEAN_TEXT, eta_pace, job_rate
from ..common.state import job_now, kept_caps
from ..common.status import JobState, JobStatus
from ..common.wire import HostFault
from ..job.store.outputs import load_existing
from ..job.store.prompts import PromptFile
from .stage_bytes import stage_bytes


def cap_for(tokens_per_dataset: int, mean_tokens: float) -> int:
    """Samples whose expected response tokens reach the target (floor: never over budget by design)."""
    return int(tokens_per_dataset // max(mean_tokens, 1.0))


def plan(
    paths: Paths,
    job: JobSpec,
    tokens_per_dataset: int,
    datasets: list[str] | None = None,
    now: JobStatus | None = None,
    kept: Caps | None = None,
) -> tuple[dict, dict[str, Target]]:
    """Each dataset's row, and the records its planned cap makes the job's (one read of its
    prompt file for both). `now`: the job's status while a runner makes answers: a dataset whose
    planned target is the one it runs to has left what status says is left (what its answers in
    flight have made taken off, its token budget kept), so plan and status give one figure."""
    rows, targets = {}, {}
    kept = kept_caps(paths) if kept is None else kept
    for ds in job.datasets:
        if datasets and ds.name not in datasets:
            continue
        ex = load_existing(paths.output(ds.name), update_index=False)  # the runner may be writing
        records = len(ex.ids)
        measured = sum(ex.tokens.values()) / records if records else None
        mean = ds.expected_tokens(records, measured)  # the runner's own estimate
        if records >= MIN_MEASURED:
            source = f"measured mean of {records:,} records"
        elif not records:
            source = "est_tokens (no records yet)"
        else:  # the mean it passed over is said: a plan that differs from it reads as a bug
            made = f"{records:,} record{'s' if records != 1 else ''}"
            young = f"{made}, mean {measured:,.0f}: {MIN_MEASURED} needed to use it"
            above = f"mean of {made}, above est_tokens ({MIN_MEASURED} needed to use a lower one)"
            source = f"est_tokens ({young})" if mean == ds.est_tokens else above
        cap = cap_for(tokens_per_dataset, mean)
        prompt_path = paths.root / ds.prompts
        ids = []
        if prompt_path.exists():
            pf = PromptFile(prompt_path, ds.name, cache_dir=paths.prompt_index, turns=ds.turns)
            ids = pf.ids
            pf.close()
        target = min(cap, len(ids)) if ids else cap
        targets[ds.name] = Target(target, frozenset(ids[:target]) if ids else None)
        done = sum(1 for pid in ids[:target] if pid in ex.ids) if ids else min(records, cap)
        todo = max(0, target - done)
        tokens_todo = int(todo * mean)
        running = now.datasets.get(ds.name) if now else None
        if running is not None and running.target == target and todo:
            tokens_todo = running.remaining_tokens
        rows[ds.name] = {
            "prompts": len(ids),
            "records": records,
            "mean_tokens": round(mean, 1),
            "source": source,
            "cap": cap,
            "target": target,
            "done": done,
            "todo": todo,
            "tokens_todo": tokens_todo,
            "tokens_done": sum(ex.tokens.values()),
            "selected": kept.selected(ds.name),
        }
    return rows, targets


def answer_rate(st: JobStatus) -> tuple[float | None, str]:
    """The answers' rate an ETA is reckoned at, as status reckons its own (`speed.eta_pace`), and
    what it is (the hidden-states stage's rate is of rows)."""
    if not st.stage_spec.makes_answers:
        return None, ""
    if _making(st):
        young = not st.tokens_per_s and bool(st.mean_tokens_per_s)
        pace = eta_pace(st.kept.streamed_per_s, st.tokens_per_s, st.mean_tokens_per_s, young)
        if pace:
            what = "what streams now" if st.kept.streamed_per_s else "the last minute's"
            return pace, f"{what}, as status's ETA"
    rate, mean = job_rate(st.state, st.tokens_per_s, st.mean_tokens_per_s)
    if not rate:
        return None, ""
    return rate, MEAN_TEXT if mean else "measured (last minute)"


def _making(st: JobStatus) -> bool:
    """A runner makes answers now, and status.json is its own of now."""
    return st.state == JobState.RUNNING and st.fresh(time.time())


def answer(paths: Paths, req: CtlPlan) -> HostPlan:
    """`ctl plan`'s answer: per-dataset caps for a token budget, and their ETAs at the rate status
    reckons its own at."""
    if req.tokens_per_dataset <= 0:
        raise HostFault("usage", "ctl plan: --tokens-per-dataset must be positive")
    job = JobSpec.load(release_dir() / JOB_FILE)
    st = job_now(paths)
    # status's figures are its runner's: a runner of a release before a deploy reckons with that
    # release's est_tokens, not the one the plan reads
    same = Path(st.release or "").name == release_dir().name
    making = st if _making(st) and st.stage_spec.makes_answers and same else None
    kept = kept_caps(paths)
    chosen = list(req.datasets) if req.datasets else None
    rows, targets = plan(paths, job, req.tokens_per_dataset, chosen, making, kept)
    rate, basis = answer_rate(st)
    planned = {name: PlanRow(**row) for name, row in rows.items()}
    plan_etas(planned, rate, making)
    return HostPlan(
        datasets=planned,
        tokens_per_s=rate,
        rate_basis=basis,
        state=st.state,
        max_tokens=kept.max_tokens,
        stage=stage_bytes(paths, req.spec, targets, simulated=job.engine.kind == "simulate"),
    )
