"""A runner killed with -9 writes no last status: the answers it appended after its last status write
(a second of them, more on a slow disk) are in the records and not in status.json, and nothing
rewrites it until the next runner. Where the look says so, each dataset's counts are taken from its
records again, as the next runner counts them (its target: the first N prompts of its file as it is
now, N the status's own)."""

from __future__ import annotations

from dataclasses import replace

from ..common.jobspec import JobSpec, Paths
from ..common.status import DatasetState, JobView
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
