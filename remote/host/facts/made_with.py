"""Which datasets' records were made with other settings than a job's: what a new runner of the
answers' stage refuses to open (the restart refuses it first, and status says the way out)."""

from __future__ import annotations

from pathlib import Path

from ...common.caps import Caps
from ...common.codec import read_json, typed_lines
from ...common.jobspec import JOB_FILE, Paths, deployed_spec, settings_changed
from ...common.stages import stage_of
from ...common.state import RanFrom


def mixed_settings(
    paths: Paths, caps: Caps, job: Path | None = None, answering: frozenset = frozenset()
) -> dict[str, dict[str, tuple]]:
    """Every dataset a new runner of the answers' stage would refuse to open: {name: what changed},
    its records made with other settings than the job's now (a hosts.yaml edited and deployed).
    `answering`: those the running runner has answers in flight for, whose records its stop's grace
    may still write."""
    spec = deployed_spec(job)
    if spec is None or not stage_of(caps.stage).makes_answers:
        return {}
    out = {}
    for ds in spec.datasets:
        if not caps.selected(ds.name):  # the runner opens none of its files
            continue
        meta = read_json(paths.meta(ds.name)) or {}
        now = spec.settings(ds)
        changed = settings_changed(meta, now) if meta else {}
        forced = meta.get("accepted")
        if ds.name in answering and isinstance(forced, dict):
            # the running runner took these with --force and has made none yet: its stop's
            # grace writes its first records with them, which a runner of `now` then refuses
            changed = changed or settings_changed(forced, now, accepted=False)
        if changed and (ds.name in answering or has_records(paths.output(ds.name))):
            out[ds.name] = changed
    return out


def release_made_with(paths: Paths, caps: Caps, names: list[str]) -> str | None:
    """The newest release on the host whose job has the settings the records of every one of
    `names` were made with: the one `invoke rollback --to` takes for a restart that is refused
    (a plain rollback goes to the last release that ran, which may not have them). One a runner
    ran from first: a release deployed and never run (a deploy cut short, an edit refused) may
    differ in more than the settings."""
    try:
        rels = [d for d in (paths.root / "releases").iterdir() if (d / JOB_FILE).is_file()]
    except OSError:
        return None
    ran = {r.release for r in typed_lines(paths.ran, RanFrom)}
    for rel in sorted(rels, key=lambda d: (d.name in ran, d.stat().st_mtime), reverse=True):
        spec = deployed_spec(rel / JOB_FILE)
        if spec is None or not set(names) <= set(spec.dataset_names()):
            continue
        if not set(names) & set(mixed_settings(paths, caps, rel / JOB_FILE)):
            return rel.name
    return None


def has_records(path: Path) -> bool:
    """A whole line in it: a torn one alone (a kill mid-write) the runner cuts, and has none."""
    try:
        with open(path, "rb") as f:
            return any(b"\n" in chunk for chunk in iter(lambda: f.read(1 << 16), b""))
    except OSError:
        return False
