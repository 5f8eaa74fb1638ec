"""Which prompt goes next: the datasets of the job in job order, their caps and token budgets, and a
re-cap (with prompt files deployed since the start reloaded) applied while the job runs."""

from __future__ import annotations

from typing import Callable

from ...common.caps import Caps
from ...common.jobspec import JobSpec, Paths
from ...common.state import moved_text
from ...common.status import Reload
from ..store import history
from ..store.datasets import BadInput, DatasetRun, SettingsDiffer, error_ids, open_dataset
from ..store.prompts import Prompt, PromptFile, line_ids_unchanged
from ..store.rates import ActiveTime
from ..store.writer import RecordWriter


class Scheduler:
    def __init__(
        self,
        paths: Paths,
        job: JobSpec,
        caps: Caps,
        writer: RecordWriter,
        log: Callable[[str], None],
        force: bool = False,
    ):
        self.paths, self.job, self.caps = paths, job, caps
        self.writer, self.log, self.force = writer, log, force
        self.runs: dict[str, DatasetRun] = {}
        self.reloaded: dict[str, Reload] = {}  # prompt files reloaded by the last re-cap
        self.before: dict[str, ActiveTime] = {}  # what the runners before this one made, and when

    def unknown(self, caps: Caps) -> list[str]:
        return [
            n for n in (caps.datasets or []) + list(caps.caps) if n not in self.job.dataset_names()
        ]

    def prepare(self, left: dict | None = None) -> None:
        """`left`: the `made` the runner before left in status.json."""
        self.before = history.active(self.paths.history, left)
        self.writer.active = ActiveTime().plus(self.before.get("", ActiveTime()))
        unknown = self.unknown(self.caps)
        if unknown:
            raise BadInput(
                f"unknown dataset {', '.join(unknown)}; the job has {', '.join(self.job.dataset_names())}"
            )
        self.apply_caps(self.caps)
        for run in self.runs.values():
            self.report_problems(run)

    def _reloads(self, caps: Caps) -> dict[str, PromptFile]:
        """The prompt files a deploy replaced under selected datasets, opened and checked; raises
        BadInput (closing them all) where reloading would make an old id name another prompt."""
        fresh: dict[str, PromptFile] = {}
        try:
            for name, run in self.runs.items():
                if not caps.selected(name) or not run.prompts.changed_on_disk():
                    continue
                new = PromptFile(
                    run.prompts.path,
                    name,
                    cache_dir=self.paths.prompt_index,
                    turns=run.spec.turns,
                )
                fresh[name] = new
                if not (
                    run.prompts.is_prefix_of(new) or (run.prompts.explicit_ids and new.explicit_ids)
                ):
                    raise BadInput(moved_text([name], [run.spec.prompts], "reloaded live"))
        except BaseException:
            for pf in fresh.values():
                pf.close()
            raise
        return fresh

    def apply_caps(self, caps: Caps) -> None:
        reloads = self._reloads(caps)  # checked before anything changes
        try:  # open what is newly selected first: a failure changes nothing
            mixed = {}  # every dataset whose settings differ, said at once
            for spec in self.job.datasets:
                if caps.selected(spec.name) and spec.name not in self.runs:
                    settings = self.job.settings(spec)
                    try:
                        run = open_dataset(self.paths, spec, settings, self.force, self.log)
                    except SettingsDiffer as e:
                        mixed.update(e.mixed)
                        continue
                    if run.done:  # a rate over the job's whole life, not this runner's alone
                        run.active = run.active.plus(self.before.get(spec.name, ActiveTime()))
                    self.runs[spec.name] = run
            if mixed:
                raise SettingsDiffer(mixed)
        except BaseException:
            for pf in reloads.values():
                pf.close()
            raise
        self.reloaded = {}
        for name, new in reloads.items():
            run = self.runs[name]
            self.reloaded[name] = Reload(len(run.prompts), len(new))
            run.reload(new)
            line_ids_unchanged(self.paths, name, new)  # kept: the file now
            self.log(
                f"{name}: prompts file changed on the host: reloaded, {self.reloaded[name].before} -> "
                f"{len(new)} prompts"
            )
        self.caps = caps
        for name, run in self.runs.items():
            # deselected live: dispatch nothing more
            run.set_target(caps.target(name) if caps.selected(name) else 0, caps.max_tokens)
        for name in reloads:
            self.report_problems(self.runs[name])

    def report_problems(self, run: DatasetRun) -> None:
        """Unreadable prompt lines inside the target: into errors.jsonl once, never sent."""
        if not run.prompts.problems:
            return
        reported = error_ids(self.paths.errors(run.spec.name))
        for index in sorted(run.prompts.problems):
            p = run.prompts[index]
            if index < run.target_n and p.id not in run.done:
                if p.id not in reported:  # said once in errors.jsonl, not again on every start
                    self.writer.write_error(run, p, p.problem or "unreadable prompt", 0)
                if run.ledger.is_new(p.id):  # a re-cap reports again what is failed already
                    run.ledger.fail(p.id)

    def next_prompt(self, now: float) -> tuple[DatasetRun, Prompt] | None:
        for spec in self.job.datasets:  # sent again (kept answers, retries due) before new ones
            run = self.runs.get(spec.name)
            if run is not None and run.due_now(now):
                p = run.next_prompt(now)
                if p is not None:
                    return run, p
        for spec in self.job.datasets:  # job order: the window rolls from one dataset into the next
            run = self.runs.get(spec.name)
            p = run.next_prompt(now) if run is not None else None
            if p is not None:
                return run, p
        return None

    def has_work(self) -> bool:
        return any(run.has_work() for run in self.runs.values())

    def notice_changed_prompts(self) -> None:
        """A deploy may have replaced a prompt file: say so (status); a re-cap reloads it."""
        for run in self.runs.values():
            run.prompts_changed = run.prompts.changed_on_disk()

    def caps_line(self) -> str:
        return ", ".join(f"{n}={r.target_n}" for n, r in self.runs.items())

    def summary(self) -> str:
        return ", ".join(f"{n} {r.done_in_target}/{r.target_n}" for n, r in self.runs.items())

    def close(self) -> None:
        for run in self.runs.values():
            run.out.close()
            run.err.close()
            run.prompts.close()
            if run.partials is not None:
                run.partials.close()
