"""A dataset's records counted again, as the next runner counts them (its target: the first N prompts
of its file as it is now), where the status cannot tell: a runner killed with -9 writes no last
status (the answers it appended after its last status write are in the records, not in
status.json, and nothing rewrites it until the next runner); a restart's dry run that moves a
target over records no status counts (a dataset run again after --datasets left it out)."""

from __future__ import annotations

from dataclasses import replace

from ..common.answers import RestartAnswer
from ..common.jobspec import JobSpec, Paths
from ..common.status import DatasetState, JobStatus, JobView, planned_state
from ..job.store.outputs import load_existing
from ..job.store.prompts import dataset_target


def recount(paths: Paths, st: JobView, job: JobSpec | None) -> None:
    """`st`'s datasets counted from their records again, in place, by `job`'s prompt files (none
    where one cannot be read: the status's counts stand)."""
    specs = {ds.name: ds for ds in job.datasets} if job else {}
    for name, d in list(st.datasets.items()):
        spec = specs.get(name)
        target = dataset_target(paths, spec, d.target) if spec and d.target else None
        if target is None or target.ids is None:
            continue
        ex = load_existing(paths.output(name), update_index=False)  # nothing written: a look
        mine = [i for i in ex.ids if i in target.ids]
        if len(mine) <= d.done:
            continue
        done = len(mine)
        st.datasets[name] = replace(
            d,
            done=done,
            records=len(ex.ids),
            completion_tokens=sum(ex.tokens[i] for i in mine),
            mean_tokens=sum(ex.tokens.values()) / len(ex.ids),
            finish_length=sum(1 for i in mine if ex.finish.get(i) == "length"),
            state=DatasetState.COMPLETE if done >= d.target else d.state,
        )
    st.completion_tokens = sum(d.completion_tokens for d in st.datasets.values())


def count_in_targets(paths: Paths, out: RestartAnswer, job: JobSpec | None) -> None:
    """A restart's rows whose done the status could only bound (`done_most`: a target moved over
    records it does not place) counted exactly, in place, with the records beyond the target and
    the state they give (a dataset run again after --datasets left it out read `0–10 ?`, and a
    raise, though all ten were made)."""
    specs = {ds.name: ds for ds in job.datasets} if job else {}
    st = JobStatus.read(paths.status) or JobStatus()
    for name, row in out.caps.items():
        spec = specs.get(name)
        if row.done_most is None or spec is None:
            continue
        target = dataset_target(paths, spec, row.target)
        if target.ids is None:
            continue
        ex = load_existing(paths.output(name), update_index=False)  # nothing written: a look
        row.done = sum(1 for i in ex.ids if i in target.ids)
        row.done_most, row.beyond = None, len(ex.ids) - row.done
        d = st.datasets.get(name) if st.stage == out.kept.stage else None
        row.state = planned_state(row, d, out.kept)
