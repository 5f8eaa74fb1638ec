"""Rich output for the command layer. Library code returns data; only this module prints it."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from remote.common.caps import DISK_MARGIN, fmt_bytes
from remote.common.jobspec import JOB_FILE, changes_text, dataset_changes_text, job_changes
from remote.common.speed import job_rate
from remote.common.status import NOT_RUN, RESTARTING, JobState, JobView

from ..errors import DeployToolError
from .progress import (
    DIM,
    beyond_text,
    dataset_eta,
    dataset_rate,
    done_text,
    engine_text,
    extra_lines,
    fmt_rate,
    job_differs,
    job_eta,
    mean_note,
    stale_text,
    train_lines,
)
from .progress import fmt_duration as _eta
from .progress import fmt_tokens as _tok
from .typed import say

if TYPE_CHECKING:
    from pathlib import Path

    from remote.common.answers import PlanAnswer, RolledBack, StageBytes

    # a type only: deploy's tarfile and hashlib stay unimported for `status`
    from ..ops.deploy import DeployResult
    from ..ops.export import ExportResult


class _Stdout(Console):
    def on_broken_pipe(self) -> None:
        """A reader that closed our stdout (`invoke status | head -1`) had what it wanted: the
        error goes up to the entry, which ends the command quietly (rich's own exits 1)."""
        self.quiet = True
        raise BrokenPipeError


def _console() -> Console:
    out = _Stdout(highlight=False)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        # piped or logged (`invoke status | cat`): each line whole, not folded at 80 columns
        out = _Stdout(highlight=False, width=PIPED_WIDTH, soft_wrap=True)
    return out


PIPED_WIDTH = 400
console = _console()


def note(text: str, out: Console = console) -> None:
    """A progress line between results (rich markup allowed)."""
    out.print(text)


def plain_note(text: str, out: Console = console) -> None:
    """A progress line that quotes something else (a log line): no markup, one line."""
    out.print(text, markup=False, soft_wrap=True)


def trusted_key(host: str, key: str) -> None:
    """Trust on first use is said out loud, on stderr so it survives `--json` and pipes."""
    import sys

    print(
        f"{host}: trusted a new host key (host_key: accept-new): {key}, now in known_hosts",
        file=sys.stderr,
    )


def status_json(results: dict) -> None:
    import json

    print(json.dumps({name: st.to_dict() for name, st in results.items()}, indent=1))


ROLLED_TO = {
    "ran": "the last release a runner ran from",
    "deployed": "the release deployed before it (no runner ran from an earlier one)",
    "named": "as --to named",
}


def rollback_result(r: RolledBack, out: Console = console) -> None:
    """Which release it went to and why, and what its job differs in from the one it left: a
    rollback that lands somewhere unexpected is seen at once."""
    left = "" if r.previous_ran or not r.previous else ", from which no runner ran"
    why = ROLLED_TO[r.why] + (" before it" if r.why == "ran" and r.previous_ran else "")
    out.print(f"[bold]{r.host}[/]: current -> {r.current} (was {r.previous}{left}): {why}")
    changed = job_changes(r.previous_job, r.job)
    if changed:
        out.print(f"  job.json: {escape(changes_text(changed))}")
    elif r.job and r.current != r.previous:
        out.print("  job.json the same: only the code of remote/ differs")
    if r.settings_differ:
        out.print(records_differ(r.settings_differ))
        ways = say(
            "a new runner is refused until they agree: `invoke status` names a release made with "
            "them (`invoke rollback --to ID`), or `invoke restart --force` to mix them",
            r.host,
        )
        out.print(f"  {escape(ways)}")


LIST_AT_MOST = 12  # files a deploy lists one by one


def _by_folder(paths: list[str]) -> str:
    """`job.json, remote/ (57)`: counts by top-level folder, in first-seen order."""
    counts: dict[str, int] = {}
    for p in paths:
        top, sep, _ = p.partition("/")
        key = top + sep
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(k if not k.endswith("/") else f"{k} ({n})" for k, n in counts.items())


def deploy_result(r: DeployResult, out: Console = console) -> None:
    verb = "would deploy" if r.dry_run else "deployed"
    if not r.changed:
        sent = "nothing to send" if r.dry_run else "0 bytes of file data sent"
        out.print(f"[bold]{r.host}[/]: nothing changed (release {r.release} is current); {sent}")
        draft_sent(r, out)
        return
    if r.release == r.previous:  # the code and the job as they were: only prompt files went
        went = (("prompt files", r.prompts), ("the draft", r.draft and r.draft.changed))
        what = " and ".join(w for w, sent in went if sent)
        out.print(f"[bold]{r.host}[/]: release {r.release} kept; {verb} {what}")
    else:
        out.print(f"[bold]{r.host}[/]: {verb} release {r.release} (was {r.previous or 'none'})")
    for label, items, style in (
        ("added", r.added, "green"),
        ("modified", r.modified, "yellow"),
        ("removed", r.removed, "red"),
        ("prompts", r.prompts, "cyan"),
    ):
        if len(items) > LIST_AT_MOST:  # a first deploy: every file; say where, not each one
            out.print(f"  [{style}]{label:8}[/] {len(items)} files: {_by_folder(items)}")
            continue
        for item in items:
            out.print(f"  [{style}]{label:8}[/] {item}")
    if JOB_FILE in r.modified and r.job_changes:  # what the job itself changes in, said whole
        out.print(f"  job.json: {escape(changes_text(r.job_changes))}")
    draft_sent(r, out)
    if r.prompts_in_use:
        files = ", ".join(r.prompts_in_use)
        pid = next(iter(r.prompts_in_use.values()))
        will = "would replace" if r.dry_run else "replaced"
        hint = say("`invoke restart` reloads it live", r.host)
        out.print(
            f"  [yellow]{will} {files}, in use by the running job (pid {pid})[/]: it keeps reading the "
            f"file it opened; {escape(hint)} (records already written still count)"
        )
    if r.settings_differ:
        settings_differ(r, out)
    if r.dry_run:  # nothing went: a time would read as a send
        out.print(f"  would send {fmt_bytes(r.bytes_sent)}; nothing sent (--dry-run)")
        return
    extra = f"; pruned {', '.join(r.pruned)}" if r.pruned else ""
    out.print(f"  sent {fmt_bytes(r.bytes_sent)} in {r.seconds:.2f}s{extra}")


def _files(n: int) -> str:
    return f"{n} file{'s' if n != 1 else ''}"


def draft_sent(r: DeployResult, out: Console = console) -> None:
    """`draft    ./drafts/k → data/draft-models/k: sent 2 files, 1.1 GiB (of 3 files, 1.2 GiB)` (or `unchanged`)."""
    d = r.draft
    if d is None:
        return
    head = f"  [cyan]{'draft':8}[/] {escape(d.written)} → {d.folder}: "
    whole = f"{_files(d.files)}, {fmt_bytes(d.size)}"
    if not d.changed:
        out.print(f"{head}unchanged ({whole})")
        return
    parts = []
    if d.sent:
        verb = "would send" if r.dry_run else "sent"
        part = f" (of {whole})" if len(d.sent) < d.files else ""
        parts.append(f"{verb} {_files(len(d.sent))}, {fmt_bytes(d.sent_bytes)}{part}")
    if d.resumed:  # the whole files of a deploy cut off, on the host beside the copy
        parts.append(f"{_files(len(d.resumed))} already there from a deploy cut off")
    if d.removed:
        verb = "would remove" if r.dry_run else "removed"
        parts.append(
            f"{verb} {len(d.removed)} no longer in it ({escape(', '.join(d.removed[:3]))})"
        )
    out.print(head + "; ".join(parts))


def records_differ(differ: dict, verb: str = "differ") -> str:
    """`settings differ from the records': B1, B2: …`, deploy's and rollback's line alike."""
    return f"  [yellow]settings {verb} from the records': {escape(dataset_changes_text(differ))}[/]"


def settings_differ(r: DeployResult, out: Console = console) -> None:
    """Said at the deploy that makes it so (the user's choice, so deployed all the same), not first
    at the restart it would refuse: every dataset affected, what changed, and the ways out."""
    out.print(records_differ(r.settings_differ, "would differ" if r.dry_run else "differ"))
    ways = say(
        "a runner running goes on with those (a restart of caps alone re-caps it live); a new one "
        "is refused until they agree: deploy the old settings back (restore them in hosts.yaml and "
        "`invoke deploy`, or `invoke rollback`), or `invoke restart --force` to mix them (it stops "
        "the job; each dataset resumes with the new settings after its records, its "
        "<DS>.meta.json keeping the old ones, and `invoke export` asks for --mixed)",
        r.host,
    )
    out.print(f"  {escape(ways)}")


def failures(errs: dict[str, DeployToolError], out: Console = console) -> None:
    for host, e in errs.items():
        out.print(f"[bold red]{host}[/]: FAILED: {escape(say(str(e), host))}")
        for line in e.details:
            out.print(f"  {host} | {line}", markup=False, highlight=False)


def hosts_table(
    rows: list[tuple[str, str, str, str, str]],
    problems: list[tuple[str, str]] = (),
    out: Console = console,
) -> None:
    t = Table("host", "address", "remote_dir", "server listens", "check")
    for row in rows:
        t.add_row(*row)
    out.print(t)
    for host, why in problems:  # whole sentences, never squeezed into a table cell
        out.print(f"[bold red]{host}[/]: {escape(why)}", soft_wrap=True)


STATUS_COLS = ("dataset", "done/target", "state", "tokens", "tok/s", "ETA", "errors", "length-cut")
STAGE_COLS = ("dataset", "rows", "state", "tokens in rows", "tok/s", "ETA", "failed")
DRAFT_COLS = ("dataset", "answered", "state", "acceptance length", "by position", "tok/s", "failed")


def draft_table(s: JobView) -> Table:
    """The draft stage's measure per dataset, by vLLM's own counters."""
    t = Table(*DRAFT_COLS, box=None)
    for name, d in s.datasets.items():
        c = d.draft
        length = c.mean_acceptance_length if c else None
        t.add_row(
            name,
            f"{d.done:,}/{d.target:,}",
            s.dataset_state_label(name),
            "-" if length is None else f"{length:.2f}",
            c.by_position() if c else "-",
            fmt_rate(s, d),
            str(d.errors),
        )
    return t


def streaming_text(s: JobView) -> str:
    """What the engine makes now, beside a rate of finished answers far below it: long answers
    in flight (256 of 8k tokens each) finish minutes after their tokens come, and the rate read
    `5* tok/s` while the engine made 1.5k. The ETA is reckoned at it."""
    streams = s.kept.streamed_per_s if s.stage_spec.makes_answers and not s.ending else 0.0
    if s.state != JobState.RUNNING or not streams:
        return ""
    shown, _ = job_rate(s.state, s.tokens_per_s, s.mean_tokens_per_s)
    if shown and streams < 1.5 * shown:
        return ""
    return f" ({_tok(streams)} tok/s streaming, answers in flight included)"


def work_table(s: JobView, out: Console, now: float) -> None:
    """The answers', or the hidden-states stage's rows', per dataset, and the totals."""
    rows = s.stage_spec.makes_rows  # rows of hidden states: no finish reason to count
    t = Table(*(STAGE_COLS if rows else STATUS_COLS), box=None)
    rates = {name: dataset_rate(s, name) for name in s.datasets}
    for name, d in s.datasets.items():
        t.add_row(
            name,
            done_text(s, name),
            s.dataset_state_label(name),
            _tok(d.completion_tokens),
            rates[name],
            dataset_eta(s, name),
            str(d.errors),
            *(() if rows else (str(d.finish_length),)),
        )
    out.print(t)
    total = fmt_rate(s)
    if any(rate.endswith("*") for rate in [total, *rates.values()]):  # a mean shown for a rate
        out.print(f"  {mean_note('rows' if rows else 'answers')}", markup=False)
    beyond = [f"{n} {d.beyond:,}" for n, d in s.datasets.items() if d.beyond]
    if beyond and rows:  # the stage's counts are rows: those of the answers past the cap
        out.print(
            f"  rows beyond the cap (of answers past it: kept on the host, left out of these "
            f"counts and of the training rows): {', '.join(beyond)}",
            markup=False,
        )
    elif beyond:
        out.print(
            "  records beyond the cap (made before it was lowered or in flight then, or of "
            "prompts the file no longer has among its first N: kept on the host, left out of "
            f"these counts, of export and of the hidden states): {', '.join(beyond)}",
            markup=False,
        )
    out.print(
        f"  total {_tok(s.completion_tokens)} tokens{' in rows' if rows else ''}, "
        f"{total} tok/s{streaming_text(s)}, "
        f"ETA {job_eta(s)}; {engine_text(s, now)[0]}; "
        f"errors {s.errors}"
        f"{'; STALLED' if s.stalled else ''}",
        markup=False,
    )


def status_screen(s: JobView, out: Console = console, now: float | None = None) -> None:
    now = time.time() if now is None else now
    r = s.runner
    alive = f" (pid {r.pid}, up {_eta(r.uptime_s)})" if r and r.alive else ""
    stage = f"stage {label}: " if (label := s.stage_spec.label) else ""
    out.print(f"[bold]{s.host}[/]: {stage}{s.state_label}{alive}  {release_words(s)}", markup=True)
    if s.message:
        out.print(f"  {escape(say(s.message, s.host))}")
    if s.job_differs:
        out.print(f"  [yellow]{escape(job_differs(s.host))}[/]")
    if s.stage_spec.trains:
        for line in train_lines(s):
            out.print(f"  {line}", markup=False)
    elif s.datasets and s.stage_spec.measures:
        out.print(draft_table(s), markup=False)
    elif s.datasets:
        work_table(s, out, now)  # its total line says STALLED
    if s.stalled and (s.stage_spec.trains or s.stage_spec.measures):
        out.print("  STALLED: nothing finished for engine.stall_minutes", markup=False)
    if stale := stale_text(s, now):  # by the rule tail's health line says it by
        out.print(f"  {stale}", style="red", markup=False)
    for text, style in extra_lines(s, now):
        out.print(f"  {text}", style=None if style in (DIM, "") else style, markup=False)


def _release_id(path: str | None) -> str | None:
    return path.rstrip("/").rsplit("/", 1)[-1] if path else None


def release_words(s: JobView) -> str:
    """The release that runs (or ran last), and the deployed one where it is another."""
    deployed = _release_id(s.current_release)
    runs = _release_id(s.runner.release if s.runner and s.runner.alive else None)
    ran = runs or _release_id(s.release)
    if ran is None or ran == deployed:
        return f"release {deployed or 'none'}"
    verb = "runs" if runs else "ran"
    if deployed is None:
        return f"{verb} release {ran}"
    if s.settings_differ:  # its restart would be refused: the ways that are not
        names = ", ".join(s.settings_differ)
        back = (
            f"`invoke rollback --to {s.settings_release}`, a release made with them"
            if s.settings_release
            else "restore them in hosts.yaml and `invoke deploy`"
        )
        hint = escape(
            say(
                f"deployed {deployed}, whose settings differ from those {names}'s records were "
                f"made with: {back}, or `invoke restart --force` to mix them",
                s.host,
            )
        )
    elif s.state_label == RESTARTING:  # the start a restart makes is of the deployed release
        hint = f"deployed {deployed}: the restart under way starts it"
    else:
        hint = escape(say(f"deployed {deployed}: `invoke restart` to run it", s.host))
    return f"{verb} release {ran}; [yellow]{hint}[/]"


def plan_result(r: PlanAnswer, out: Console = console) -> None:
    out.print(
        f"[bold]{r.host}[/]: caps for {_tok(r.tokens_per_dataset)} response tokens per dataset"
    )
    t = Table(
        "dataset", "done", "tok/record", "from", "cap", "to do", "tokens to do", "ETA", box=None
    )
    beyond = {n: max(0, d.records - d.done) for n, d in r.datasets.items()}
    for name, d in r.datasets.items():
        t.add_row(
            name,
            f"{d.done:,}/{d.target:,}{beyond_text(beyond[name])}",  # the records as status counts
            f"{d.mean_tokens:,.0f}",
            d.source,
            f"{d.cap:,}" + ("*" if d.fewer_prompts_than_cap else ""),
            *((f"{d.todo:,}", _tok(d.tokens_todo), _eta(d.eta_s)) if d.selected else (NOT_RUN,)),
        )
    out.print(t)
    _plan_notes(r, any(beyond.values()), out)
    if r.tokens_per_s:
        run = [d for d in r.datasets.values() if d.selected]
        total = sum(d.tokens_todo for d in run)
        last = max((d.eta_s or 0 for d in run), default=0)  # the last dataset's is the job's
        out.print(
            f"  {_tok(total)} tokens to do at {_tok(r.tokens_per_s)} tok/s ({r.rate_source}): "
            f"about {_eta(last)}"
        )
    else:
        out.print(
            "  no measured answer throughput (none made yet, or the job is in another stage): pass "
            "--tokens-per-s for an ETA"
        )
    if r.stage is not None:
        out.print(stage_bytes_line(r.stage))


def _plan_notes(r: PlanAnswer, beyond: bool, out: Console) -> None:
    """What the plan's table leaves to words: datasets left out, records beyond, a short file."""
    if left := [n for n, d in r.datasets.items() if not d.selected]:
        out.print(
            f"  not run (--datasets): {', '.join(left)}: in none of the totals; `invoke restart "
            "--datasets all` runs every dataset (--apply keeps their caps for then)",
            markup=False,
        )
    if beyond:
        out.print(
            "  beyond the cap: records of prompts past these caps (kept on the host, counted in "
            "neither done nor to do; the measured mean counts them)"
        )
    if r.max_tokens is not None and r.max_tokens < r.tokens_per_dataset:
        out.print(
            f"  a token budget of {_tok(r.max_tokens)} per dataset is kept (`--max-tokens`): each "
            "dataset stops there, short of these caps, `--apply` included; `invoke restart "
            "--max-tokens none` drops it"
        )
    if any(d.fewer_prompts_than_cap for d in r.datasets.values()):
        out.print(
            "  * the dataset has fewer prompts than the cap: its target is every prompt it has"
        )


def stage_bytes_line(s: StageBytes) -> str:
    """What `--stage hidden-states` would write at these caps, beside the disk's free space."""
    head = "  hidden-states stage at these caps:"
    if not s.sampled:
        return (
            f"{head} no record with token ids yet to size its rows from (the stage reads them: "
            "job.extra_body.return_token_ids: true)"
        )
    if s.made >= s.tokens:
        return f"{head} every row is made ({_tok(s.made)} tokens)"
    # what is left, never the whole: the rows made already are said beside it
    rows = f"{_tok(s.tokens - s.made)} tokens of rows left"
    made = f"; {_tok(s.made)} of the {_tok(s.tokens)} made already" if s.made else ""
    if s.left is None:
        return f"{head} {rows} to make{made}; the bytes a token takes are {s.basis}"
    line = (
        f"{head} {fmt_bytes(s.left)} to write ({rows} × {fmt_bytes(s.bytes_per_token)} a token: "
        f"{s.basis}{made})"
    )
    if s.free is None:
        return line
    line += f"; the disk has {fmt_bytes(s.free)} free"
    if s.left * DISK_MARGIN > s.free:
        line += (
            ": [red]it does not fit[/] (the stage would stop before it starts): free space, "
            "lower the caps, or run it with --force and take finished files off as it goes "
            "(`invoke pull --hidden-states --free`)"
        )
    return line


def _files(n: int) -> str:
    return f"{n:,} file" + ("" if n == 1 else "s")


def pull_result(r, out: Console = console) -> None:
    if not r.files:
        out.print(f"[bold]{r.host}[/]: nothing to pull yet (no output files on the host)")
        return
    out.print(f"[bold]{r.host}[/]: pulled into {r.dest}: {fmt_bytes(r.bytes)} received")
    for name, f in r.files.items():
        if f.action.startswith("refused"):  # nothing received: no size to say
            out.print(f"  {f.action} {name}")
        elif f.action != "unchanged":
            out.print(f"  {f.action:10} {name} ({fmt_bytes(f.bytes)})")
    h = r.hidden
    if h is None:
        return
    here = ", ".join(f"{ds} {n:,}" for ds, n in h.rows.items()) or "none yet"
    freed = f"; freed on the host: {_files(h.freed)} ({fmt_bytes(h.freed_bytes)})"
    out.print(
        f"  hidden states: rows here {here}; {_files(h.fetched)} fetched ({fmt_bytes(h.bytes)})"
        + (freed if h.freed else "")
    )
    for line in h.missing[:5] + h.refused[:5]:
        out.print(f"  [red]{escape(line)}[/]")
    more = max(0, len(h.missing) - 5) + max(0, len(h.refused) - 5)
    if more:
        out.print(f"  … and {more:,} more")


@contextmanager
def bytes_progress(total: int, what: str):
    """A progress bar over `total` bytes, shown only when it is worth it (large, on a terminal)."""
    if total < 64 << 20 or not console.is_terminal:
        yield lambda n: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        f"[bold]{what}", BarColumn(), DownloadColumn(), TimeRemainingColumn(), console=console
    ) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)


def export_result(r: ExportResult, out: Console = console) -> None:
    left = f", {r.dropped:,} rows left out (below)" if r.dropped else ""
    out.print(
        f"[bold]{escape(str(r.out))}[/]: {r.records:,} records read, {r.rows:,} rows written "
        f"from {r.kept:,} of them{left}"
    )
    if r.per_turn_why:
        out.print(
            f"  one row per generated reply (per-turn): {r.per_turn_why}; "
            "`--whole` for whole conversations, leaving those out",
            markup=False,
        )
    out.print(f"  manifest: {r.manifest}", markup=False)
    out.print(f"  read it with: {r.reads_as}", markup=False)
    for name, d in r.datasets.items():
        out.print(f"  {export_dataset(name, d)}", markup=False)
    # how to keep what was left out, once for every dataset (each line says what went)
    keeps = [f"{_REASON.get(w, w)} ({r.keeps[w]})" for w in _left_out(r.datasets) if w in r.keeps]
    if keeps:
        out.print(f"  to keep what was left out: {', '.join(keeps)}", markup=False)


# a reason as the screen says it: `length` is the reply's finish_reason
_REASON = {"length": "finish_reason length"}


def _left_out(datasets: dict) -> list[str]:
    return list(dict.fromkeys(w for d in datasets.values() for w, n in d["dropped"].items() if n))


def export_dataset(name: str, d: dict) -> str:
    """What a dataset keeps for training, as its manifest entry says: rows kept of those made,
    what each filter dropped, and the reply tokens the kept rows train."""
    reasons = {w: n for w, n in d["dropped"].items() if n}
    dropped = sum(reasons.values())
    made = d["rows"] + dropped
    why = ", ".join(
        (f"{n:,} " if len(reasons) > 1 else "") + _REASON.get(w, w) for w, n in reasons.items()
    )
    text = f"{name}: {d['rows']:,} of {made:,} rows kept"
    if dropped:
        text += f" ({dropped:,} dropped: {why})"
    text += f", {_tok(d['tokens'])} tokens"
    if d["records"] != made:  # per-turn rows, or a record that made none
        text += f"; from {d['records']:,} records"
    return text


def report_written(r: tuple[str, Path], out: Console = console) -> None:
    host, path = r
    out.print(f"[bold]{host}[/]: report written to {path} (one file: open it in a browser)")
