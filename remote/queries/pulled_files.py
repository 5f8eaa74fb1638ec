"""What pull is told of the job's files: each output file's size and prefix hash (or the hidden-states
stage's ledgers), the caps the host keeps, and per dataset the ids of the records beyond them as the
runner counts them, so that export leaves out exactly the records status leaves out."""

from __future__ import annotations

from ..common.answers import FileInfo, FilesAnswer
from ..common.caps import Caps
from ..common.jobspec import JobSpec, Paths, deployed_spec
from ..common.protocol import CtlFiles
from ..common.records import hidden_ledgers, output_files
from ..common.state import kept_caps
from ..job.store.outputs import load_existing
from ..job.store.prompts import dataset_target


def answer(paths: Paths, req: CtlFiles) -> FilesAnswer:
    caps = kept_caps(paths)
    if req.hidden:
        return FilesAnswer(_info(hidden_ledgers(paths, req.have, req.whole)), caps)
    job = deployed_spec()
    found = output_files(paths, req.have, job.dataset_names() if job else [], req.whole)
    return FilesAnswer(_info(found), caps, beyond_caps(paths, job, caps) if job else None)


def _info(found: dict) -> dict[str, FileInfo]:
    return {name: FileInfo(**e) for name, e in found.items()}


def beyond_caps(paths: Paths, job: JobSpec, caps: Caps) -> dict[str, list[str]]:
    """Per dataset with records, the ids of those beyond its cap (read through the outputs'
    index: a few bytes a record); a dataset whose prompt file cannot be read is left to the
    records' own index."""
    out = {}
    for spec in job.datasets:
        path = paths.output(spec.name)
        if not path.exists():
            continue
        target = dataset_target(paths, spec, caps.target(spec.name))
        if target.ids is None:
            continue
        ids = load_existing(path, update_index=False).ids
        out[spec.name] = sorted(i for i in ids if not target.holds(i, None))
    return out
