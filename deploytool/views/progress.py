"""Rendering a runner's status.json: rich (live) and plain (one line per snapshot). Pure functions of
(status, now), so tests render into a StringIO console with an injected clock."""

from __future__ import annotations

import time

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from remote.common.speed import job_rate, mean_note, row_rate
from remote.common.status import (
    BUDGET_REACHED,
    DIED,
    DRAINING,
    NOT_RUN,
    RECOVERING,
    RESTARTING,
    STOPPING,
    SWITCHING,
    DatasetStatus,
    JobState,
    JobView,
    ProcessState,
    ServerMetrics,
    SwitchStep,
)

from .typed import say


def fmt_tokens(n) -> str:
    n = float(n or 0)
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def fmt_rate(st: JobView, row: DatasetStatus | None = None) -> str:
    """The job's tokens per second (or a dataset's: `row`) as `speed` says it, a mean starred
    (see mean_note); "-": none."""
    if row is None:
        rate, mean = job_rate(st.state, st.tokens_per_s, st.mean_tokens_per_s)
    else:
        rate, mean = row_rate(st.state, row.tokens_per_s, row.mean_tokens_per_s)
    return "-" if rate is None else fmt_tokens(rate) + ("*" if mean else "")


def fmt_duration(seconds) -> str:
    if seconds is None:
        return "?"
    s = max(0, int(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    if h >= 24:
        return f"{h // 24}d{h % 24:02d}h"
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def engine_text(st: JobView, now: float) -> tuple[str, bool]:
    """What the runner saw of its engine, and whether it needs attention. Once the job has ended
    no runner looks at it: what it saw last is no answer about now."""
    eng = st.engine
    if st.terminal:
        return f"engine {eng.kind}", False
    if eng.reachable:
        return f"engine {eng.kind} reachable", False
    down = now - eng.down_since if eng.down_since else None
    return f"ENGINE UNREACHABLE for {fmt_duration(down)}: {eng.last_error or '?'}", True


def health(st: JobView, now: float) -> tuple[str, bool]:
    """The health line, and whether anything in it needs attention."""
    engine, bad = engine_text(st, now)
    parts = [engine]
    every = sum(d.done for d in st.datasets.values())  # the records in the targets, every runner's
    parts.append(f"errors {st.errors}")
    bad |= bool(st.errors)
    if st.stage_spec.makes_answers:  # a row of hidden states has no finish reason; a draft's
        # answers are no training data
        parts.append(
            f"finish=length {st.finish_length / every:.1%}" if every else "finish=length -"
        )
        empty = sum(d.empty for d in st.datasets.values())
        if empty:  # cut inside the thinking, mostly: no training row can be made of them
            parts.append(
                f"no answer text: {empty:,} of this runner's {st.new_records:,} records (export "
                "leaves them out; a reply cut inside its thinking has none)"
            )
            bad |= empty * 10 > st.new_records
    if st.retries:
        parts.append(f"retries {st.retries}")
    if st.stalled:
        parts.append("STALLED: nothing finished for a while")
        bad = True
    if stale := stale_text(st, now):
        parts.append(stale)
        bad = True
    return " · ".join(parts), bad


def job_differs(host: str | None) -> str:
    """hosts.yaml's job is not the one the host's current release holds: said in one line, by
    status and tail alike (deploytool sets JobView.job_differs for both)."""
    return say(
        "hosts.yaml's job is not the one deployed: `invoke deploy` sends it, or edit hosts.yaml "
        "back to it (after a rollback, say)",
        host,
    )


def stale_text(st: JobView, now: float) -> str | None:
    """A live runner's status.json gone stale, by the one rule (JobStatus.stale_for): status and
    tail both say it, in these words."""
    age = st.stale_for(now)
    return None if age is None else f"status not updated for {fmt_duration(age)}"


def count(v: float | None) -> str:
    """A gauge of vLLM's as a whole number, `?` where the server did not say."""
    return "?" if v is None else f"{v:.0f}"


def _metrics_text(m: ServerMetrics | None) -> str:
    if not m:
        return ""
    kv = "?" if m.kv_cache is None else f"{m.kv_cache:.0%}"
    return f" · vLLM: running {count(m.running)}, waiting {count(m.waiting)}, KV cache {kv}"


def short_url(url: str) -> str:
    """http://gpu1:8000/v1 -> gpu1:8000: the part that tells servers apart, so a line fits."""
    url = url.split("://", 1)[-1]
    return url.removesuffix("/v1")


def endpoint_lines(st: JobView, now: float) -> list[tuple[str, bool]]:
    """One line per server (when there are several, one is down, or a server reports /metrics), and
    whether it needs attention."""
    show = len(st.endpoints) > 1 or any(
        not e.reachable or e.metrics or e.stuck for e in st.endpoints
    )
    out = []
    for e in st.endpoints if show else ():
        if e.reachable:
            text = (
                f"server {short_url(e.url)}: up · in flight {e.in_flight}/{e.concurrency} · "
                f"{fmt_tokens(e.tokens_per_s)} tok/s · {e.requests:,} answered · errors {e.errors}"
            )
            if e.stuck:
                text += f" · stuck {e.stuck} ({e.stuck_recent} in 10 min)"
            # a job that has ended no longer feeds the batch: its last sample would mislead
            live = None if st.terminal else e.metrics
            out.append((text + _metrics_text(live), e.degraded and not st.terminal))
        else:
            text = (
                f"server {short_url(e.url)}: DOWN for {fmt_duration(e.down_for(now))}: {e.last_error or '?'} · "
                f"{e.requests:,} answered · errors {e.errors}"
            )
            out.append((text, True))
    return out


def gpu_line(st: JobView) -> str | None:
    """Every GPU of the host on one line: utilisation each, memory in total."""
    if not st.gpus:
        return None
    util = " ".join("?" if g.util is None else str(g.util) for g in st.gpus)
    used = sum(g.memory_used or 0 for g in st.gpus) / 1024
    total = sum(g.memory_total or 0 for g in st.gpus) / 1024
    return f"GPUs {len(st.gpus)}: util % {util} · memory {used:,.0f}/{total:,.0f} GiB"


def disk_line(st: JobView) -> tuple[str, str] | None:
    """(text, style) for the outputs' disk: full, filling within ~6 hours, or just how much is free."""
    d = st.disk
    if d.free_bytes is None:
        return None
    free = d.free_bytes / (1 << 30)
    if d.full and st.stage_spec.makes_rows:
        return (
            f"DISK FULL: no new rows until there is space ({free:.1f} GiB free now); the stage "
            "goes on by itself once there is: `invoke pull --hidden-states --free` takes finished "
            "files off the host",
            "red",
        )
    if d.full:
        return (
            f"DISK FULL: {d.held} answers wait in memory, no new requests; the job carries on "
            f"by itself once there is space ({free:.1f} GiB free now)",
            "red",
        )
    hours = d.hours_left
    if hours is not None and hours < 6 and not st.terminal:
        return (
            f"disk: {free:.1f} GiB free: about {hours:.1f} h of output at the current rate",
            "yellow",
        )
    return (
        f"disk: {free:,.1f} GiB free"
        + (f" (~{hours:,.0f} h at this rate)" if hours and not st.terminal else ""),
        "dim",
    )


def hints(st: JobView) -> list[str]:
    """Plain advice from the servers' own view: idle batch room, or preemption."""
    out = []
    more = (
        st.state == JobState.RUNNING
        and not st.draining
        and st.stopping is None
        and any(not d.is_complete and d.done + d.in_flight < d.target for d in st.datasets.values())
    )
    for e in st.endpoints:
        if e.degraded and not st.terminal:
            out.append(
                f"hint: {short_url(e.url)} is DEGRADED: {e.stuck_recent} requests stuck in the last 10 "
                f"min (abandoned and sent again) while it answered {e.answered_recent}: likely a dead "
                "data-parallel rank behind it (its requests hang). `invoke server.status --host "
                "<every host of the group>` names it; stop and start the group together"
            )
            out[-1] = say(out[-1])
        m = e.metrics
        if not e.reachable or not m:
            continue
        if m.new_preemptions:
            out.append(
                f"hint: {short_url(e.url)} is preempting requests ({m.new_preemptions} since the last "
                "sample): its KV cache is too small for this many at once; lower job.engine.concurrency or raise "
                "--gpu-memory-utilization"
            )
        elif more and e.in_flight >= e.concurrency and m.room_samples >= 3:
            out.append(
                f"hint: {short_url(e.url)} runs every request it gets with none waiting and its KV cache at "
                f"{m.kv_cache:.0%}: raise job.engine.concurrency (now {e.concurrency}) to fill its batch"
            )
    return out


def notices(st: JobView) -> list[str]:
    """Things the user should act on that are not failures: prompt files replaced under a running job."""
    changed = [n for n, d in st.datasets.items() if d.prompts_changed]
    if changed and not st.terminal:
        text = f"{', '.join(changed)}: prompts changed on the host; `invoke restart` to use them"
        return [say(text, st.host)]
    return []


def recovery_lines(st: JobView) -> list[tuple[str, str]]:
    """The watcher's word: a recovery under way, a give-up, restarts done, an unsupervised job.
    (text, style) pairs."""
    sup = st.supervision
    if sup is None:
        return []
    out = []

    def add(text: str, style: str) -> None:
        out.append((text, style))

    if sup.next_stage and sup.supervised:
        add(
            f"the {sup.next_stage} stage next: the watcher starts the server again for it, "
            "then its runner",
            "cyan",
        )
    for what, w in (("server", sup.server), ("runner", sup.runner)):
        if w is None:
            continue
        if w.recovering and w.attempt == 0:  # a start for the next stage: after no death
            if not sup.next_stage:
                add(f"{what}: {w.why}", "cyan")
            continue
        if w.recovering:
            when = "starting it again"
            if w.state == ProcessState.BACKOFF:
                when = f"next try in {fmt_duration(w.next_try_in_s)}"
            add(f"RECOVERING {what}: {w.why}; attempt {w.attempt} of {w.of}, {when}", "bold red")
        elif w.state == ProcessState.FATAL:
            again = "`invoke restart` starts it again, its restarts counted anew"
            add(say(f"GAVE UP on the {what}: {w.why}; {again}", st.host), "bold red")
            out.extend((f"    {line}", "red") for line in w.log[-3:])
        elif w.restarts:  # done and over: said where the job is shown whole, not on each line
            add(
                f"{what} restarted {w.restarts}x by the watcher since a command last started it; "
                f"last cause: {w.last_cause}",
                DIM,
            )
    if st.watcher_restarts:
        add(f"watcher started again {st.watcher_restarts}x by the runner (it was gone)", DIM)
    if sup.note:
        add(say(sup.note, st.host), "yellow" if not sup.supervised else "dim")
    return out


DIM = "dim"  # a line for information: the one-line view leaves it out


def extra_lines(st: JobView, now: float) -> list[tuple[str, str]]:
    """What every view of the job says under its table, in order, each with its style: the
    servers, the kept answers, the GPUs, the disk, hints, notices, strays, a stop or a drain, the
    watcher's word."""
    out = [(text, "red" if down else DIM) for text, down in endpoint_lines(st, now)]
    out += [(text, style) for text, style in ((kept_line(st), DIM), (gpu_line(st), "")) if text]
    out += [disk] if (disk := disk_line(st)) else []
    out += [(text, "yellow") for text in hints(st) + notices(st)]
    if left := st.not_run:
        out.append(
            (
                f"not run (--datasets): {', '.join(left)}: their records are kept, out of the "
                "rows and the total tokens (a starred mean is the whole job's); `invoke restart "
                "--datasets all` runs every dataset",
                DIM,
            )
        )
    if st.strays:  # `ctl status` looks for them at every look: every view says it
        strays = f"runner processes without a pid file: {st.strays}"
        out.append((f"{strays} (restart or stop takes care of them)", "red"))
    # a restart the host carries out starts a runner after this stop: said, not "it stops"
    then = ", then a restart on the host starts the new runner" if st.restarting else ""
    if st.stopping is not None and not st.terminal:
        # from when the stop began, which status.json does not keep: no time left to count down
        grace = f"{st.stopping:g}s from the stop's start"
        cut = f"the {st.in_flight} in flight get {grace} to finish, then are cut off"
        out.append(
            (f"stopping: no new requests; {cut} (the next start asks them again){then}", "yellow")
        )
    elif st.draining and not st.terminal:
        flight = f"the {st.in_flight} in flight"
        end = then or ", then it stops"
        out.append((f"draining: no new requests; {flight} finish{end}", "yellow"))
    return out + switch_lines(st, now) + recovery_lines(st)


def switch_lines(st: JobView, now: float) -> list[tuple[str, str]]:
    """The server swap for a stage, as the host carries it out: under way, or how it failed."""
    sw = st.switch
    if sw is None or sw.step == SwitchStep.DONE:
        return []
    if sw.step == SwitchStep.FAILED:
        if not st.terminal or (st.updated_at or 0.0) > sw.step_at:
            return []  # a runner started since: the job moved on
        return [(f"the server for the {sw.stage} stage: {sw.error}", "red")]
    if not sw.alive:
        return [(f"the server swap for the {sw.stage} stage was cut off at: {sw.step}", "red")]
    step = str(sw.step)
    if sw.step == SwitchStep.LOADING:
        step = (
            f"{sw.model} loading, {fmt_duration(now - sw.step_at)} of up to {sw.ready_timeout:g}s"
        )
    why = f"the server {sw.why}" if sw.why else "the server was down"
    line = f"switching to the {sw.stage} stage ({why}): {step}; its runner starts once it answers"
    return [(line, "cyan")]


def done_text(st: JobView, name: str) -> str:
    """A dataset's done/target; one left out (--datasets) has no target: its records made, which
    stay (it read `0/0`, as if they were gone)."""
    d = st.datasets[name]
    if st.dataset_state_label(name) == NOT_RUN:
        return f"{d.records:,} made"
    return f"{d.done:,}/{max(d.target, 0):,}"


FINISHING = "finishing"  # an ETA run out with answers still in flight: longer than expected


def job_eta(st: JobView) -> str:
    """The job's ETA as every view says it: none while it ends; starred where it is reckoned at
    the job's mean (a runner younger than a minute of its own answers, nothing streamed to measure
    it by: a guess until then); `finishing` where it has run out while answers are still in flight
    (they are longer than expected: when they end cannot be said)."""
    if st.ending:
        return "-"
    if _finishing(st, st.eta_s, st.in_flight):
        return FINISHING
    if st.eta_guess is None:  # an older release's: starred wherever its rate is the mean
        _, mean = job_rate(st.state, st.tokens_per_s, st.mean_tokens_per_s)
        starred = mean and st.eta_s and st.state == JobState.RUNNING
    else:
        starred = st.eta_guess and st.eta_s and st.state == JobState.RUNNING
    return fmt_duration(st.eta_s) + ("*" if starred else "")


def dataset_eta(st: JobView, name: str) -> str:
    """A dataset's ETA as every view says it: none once it is complete or while the job ends;
    `finishing` as the job's."""
    d = st.datasets[name]
    if d.is_complete or st.ending:
        return "-"
    if _finishing(st, d.eta_s, d.in_flight):
        return FINISHING
    return fmt_duration(d.eta_s)


def _finishing(st: JobView, eta_s: int | None, in_flight: int) -> bool:
    """An answers' ETA run out with answers in flight. The hidden-states stage's rows take under a
    second each: an ETA of 0 there is under a second, never a dataset with no row made `finishing`."""
    return (
        eta_s == 0
        and bool(in_flight)
        and st.state == JobState.RUNNING
        and st.stage_spec.makes_answers
    )


def dataset_rate(st: JobView, name: str) -> str:
    """A dataset's tok/s as every view says it; none for one --datasets leaves out (its mean is
    the earlier runs')."""
    d = st.datasets[name]
    return "-" if st.dataset_state_label(name) == NOT_RUN else fmt_rate(st, d)


def totals(statuses: list[JobView]) -> tuple[int, str, int | None]:
    """Tokens, tokens/s (each host's as its own line says it; starred where one is a mean; of the
    hosts still at work, an ended one making none, else of every host) and the ETA over every host
    (the ETA: the last host to finish)."""
    tok = sum(s.completion_tokens for s in statuses)
    working = [s for s in statuses if not s.terminal] or statuses
    rates = [job_rate(s.state, s.tokens_per_s, s.mean_tokens_per_s) for s in working]
    rate = fmt_tokens(sum(r or 0 for r, _ in rates)) + ("*" if any(m for _, m in rates) else "")
    etas = [s.eta_s for s in statuses if not s.ending]
    if not etas:  # every host ended (nothing left: 0), or one still ends its work (none to give)
        return tok, rate, None if any(not s.terminal for s in statuses) else 0
    return tok, rate, max(etas) if None not in etas else None


def all_hosts_eta(statuses: list[JobView], eta: int | None) -> str:
    """The ETA over every host (`totals`'), `finishing` where the last hosts' has run out while
    their answers are still in flight."""
    if eta == 0 and any(job_eta(s) == FINISHING for s in statuses):
        return FINISHING
    return fmt_duration(eta)


def kept_line(st: JobView) -> str | None:
    """The unfinished answers' tokens kept for a restart, and what continuing them saved."""
    k = st.kept
    if not k.on:
        # the stand-in has no tokens to keep: nothing a user could change, so nothing to say
        quiet = st.terminal or not k.why_not or st.engine.kind == "simulate"
        return None if quiet else f"restarts redo answers in flight: {k.why_not}"
    text = f"streaming {fmt_tokens(k.streamed_per_s)} tok/s · unfinished answers: {fmt_tokens(k.tokens)} tokens kept"
    if k.waiting:
        text += f" ({k.waiting} waiting to be continued)"
    if k.continued:
        text += f" · continued {k.continued} after a restart, saving {fmt_tokens(k.tokens_saved)} tokens"
    if k.started_over:
        text += f" · {k.started_over} asked again from their start (see the log)"
    if k.why_not:
        text += f" · {k.why_not}"
    return text


STATE_STYLE = {
    JobState.FINISHED: "green",
    JobState.FAILED: "red",
    DIED: "red",
    JobState.STOPPED: "yellow",
    RECOVERING: "yellow",
    SWITCHING: "yellow",
    STOPPING: "yellow",
    DRAINING: "yellow",
    RESTARTING: "yellow",
}


def _accuracy(acc: list[float]) -> str:
    return " ".join(f"{a:.0%}" for a in acc) if acc else "-"


def train_lines(st: JobView) -> list[str]:
    """The train stage's lines, as status and tail show them: where the trainer is, how well the
    draft guesses each position (the last step's; the last validation's), and what it made."""
    t = st.train
    if t is None:
        return ["the trainer has not said anything yet"]
    steps = f"{t.step:,}/{t.steps:,}" if t.steps else f"{t.step:,}"
    loss = f"{t.loss:.3f}" if t.loss is not None else "-"
    eta = fmt_duration(t.eta_s) if t.eta_s is not None and not st.ending else "-"
    # an ended runner's last word is no phase it is in: where it got to
    phase = ("trained" if t.phase == "done" else "ended at") if st.terminal else t.phase
    lines = [
        f"{phase or 'starting'}: epoch {min(t.epoch + 1, t.epochs)}/{t.epochs} · step {steps} · "
        f"loss {loss} · accuracy per position {_accuracy(t.accuracy)} · "
        f"{fmt_tokens(t.tokens_per_s)} tok/s · ETA {eta}"
    ]
    if t.val_loss is not None:
        best = f" (best: epoch {t.best_epoch + 1})" if t.best_epoch is not None else ""
        lines.append(
            f"validation: loss {t.val_loss:.3f} · accuracy per position "
            f"{_accuracy(t.val_accuracy)}{best}"
        )
    rows = ", ".join(f"{n} {d.target:,}" for n, d in st.datasets.items())
    made = f"rows {t.rows:,} ({rows})" if t.rows else "the training rows: not made yet"
    restarts = f" · trainer started again {t.restarts}×" if t.restarts else ""
    lines.append(made + restarts + (f" · pid {t.pid}" if t.pid else ""))
    return lines


def _datasets_table(st: JobView, rows: bool) -> Table:
    """tail's row per dataset: a bar, done/target, tokens, tok/s, ETA, state."""
    table = Table(box=None, pad_edge=False, expand=False, show_edge=False)
    table.add_column("dataset")
    table.add_column("", width=24)
    for col in ("rows" if rows else "done/target", "tokens in rows" if rows else "tokens"):
        table.add_column(col, justify="right")
    table.add_column("tok/s", justify="right")
    table.add_column("ETA", justify="right")
    table.add_column("state")
    for name, d in st.datasets.items():
        target = max(d.target, 0)
        bar = ProgressBar(
            total=max(target, 1),
            completed=min(d.done, target) if target else 1,
            width=24,
            complete_style="green" if d.is_complete else "cyan",
        )
        eta = dataset_eta(st, name)
        table.add_row(
            name,
            bar,
            done_text(st, name) + beyond_text(d.beyond),
            fmt_tokens(d.completion_tokens),
            dataset_rate(st, name),
            eta,
            st.dataset_state_label(name)
            + (f" · {draft_text(st, d)}" if st.stage_spec.measures else ""),
        )
    return table


def host_view(host: str, st: JobView | None, now: float, note: str | None = None):
    if st is None:
        return Text(f"{host}: no status yet" + (f" ({note})" if note else ""), style="yellow")
    if st.stage_spec.trains:
        return _train_view(host, st, now, note)
    rows = st.stage_spec.makes_rows  # the stage counts rows of hidden states, not answers
    table = _datasets_table(st, rows)
    state = st.state_label
    head = Text.assemble(
        (f"{host}", "bold"),
        ": ",
        (("hidden states " if rows else "") + state, STATE_STYLE.get(state, "bold")),
        f"  pid {st.pid or '?'}  in flight {st.in_flight}/{st.concurrency or '?'}",
    )
    total = Text(  # the hidden-states stage's rate too in tok/s, the unit status says it in
        f"total {fmt_tokens(st.completion_tokens)} tokens{' in rows' if rows else ''} · "
        f"{fmt_rate(st)} tok/s"
        f" · ETA {job_eta(st)}"
        f" · elapsed {fmt_duration(now - st.started_at) if st.started_at else '?'}"
    )
    line, bad = health(st, now)
    parts = [head]
    if st.job_differs:  # under the head, as status says it under its first line
        parts.append(Text(job_differs(host), style="yellow"))
    parts += [table, total, Text(line, style="red" if bad else "dim")]
    if "*" in total.plain or any("*" in dataset_rate(st, n) for n in st.datasets):
        made = "rows" if rows else "answers"  # what a starred rate is, as status says
        parts.append(Text(mean_note(made), style="dim"))
    parts += [Text(text, style=style) for text, style in extra_lines(st, now)]
    if st.message:
        parts.append(Text(st.message, style="yellow"))
    if note:
        parts.append(Text(note, style="yellow"))
    return Group(*parts)


def _train_view(host: str, st: JobView, now: float, note: str | None):
    head = Text.assemble(
        (f"{host}", "bold"), ": train ", (st.state_label, STATE_STYLE.get(st.state_label, "bold"))
    )
    line, bad = health(st, now)
    parts = [head]
    if st.job_differs:
        parts.append(Text(job_differs(host), style="yellow"))
    parts += [Text(x) for x in train_lines(st)]
    parts.append(Text(line, style="red" if bad else "dim"))
    parts += [Text(text, style=style) for text, style in extra_lines(st, now)]
    parts += [Text(x, style="yellow") for x in (st.message, note) if x]
    return Group(*parts)


def view(
    snapshots: dict[str, JobView | None], notes: dict[str, str | None], now: float | None = None
):
    now = time.time() if now is None else now
    parts = [host_view(h, st, now, notes.get(h)) for h, st in snapshots.items()]
    present = [s for s in snapshots.values() if s]
    if len(snapshots) > 1 and present:
        tok, rate, eta = totals(present)
        parts.append(
            Text(
                f"all hosts: {fmt_tokens(tok)} tokens · {rate} tok/s · ETA {all_hosts_eta(present, eta)}",
                style="bold",
            )
        )
    return Group(*parts)


def draft_text(st: JobView, d: DatasetStatus) -> str:
    """What the draft stage measured on a dataset: vLLM's mean acceptance length and the share of
    drafts accepted at each position."""
    c = d.draft
    if c is None:  # the baseline's: no draft
        return f"no draft, {fmt_rate(st, d)} tok/s"
    if c.mean_acceptance_length is None:
        return "acceptance length -"
    rates = c.by_position()
    return f"acceptance length {c.mean_acceptance_length:.2f} (by position {rates})"


def beyond_text(n: int) -> str:
    """Records beyond the cap (made before it was lowered, or of prompts the file no longer has
    among its first N): kept on the host, counted apart wherever counts are."""
    return f" +{n:,} beyond the cap" if n else ""


def plain_line(host: str, st: JobView | None, now: float, note: str | None = None) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    if st is None:
        return f"{stamp} {host}: no status yet" + (f" ({note})" if note else "")
    ds = " ".join(
        f"{n} {done_text(st, n)}{beyond_text(d.beyond)}"
        + (f" {draft_text(st, d)}" if st.stage_spec.measures else "")
        + (
            f" ({state})"
            if (state := st.dataset_state_label(n)) in (BUDGET_REACHED, NOT_RUN)
            else ""
        )
        for n, d in st.datasets.items()
    )
    line, _ = health(st, now)
    eta = job_eta(st)
    stage = f" {label}" if (label := st.stage_spec.label) else ""
    made = f"{fmt_tokens(st.completion_tokens)} tok {fmt_rate(st)} tok/s ETA {eta}"
    if st.stage_spec.makes_rows:
        ds += " rows"
        made = f"{fmt_tokens(st.completion_tokens)} tok in rows {fmt_rate(st)} tok/s ETA {eta}"
    if st.stage_spec.trains:  # no answers made: the trainer's own line (its ETA in it)
        ds, made = train_lines(st)[0], ""
    out = f"{stamp} {host}:{stage} {st.state_label} | {ds} | {made} | {line}".replace("|  |", "|")
    parts = [job_differs(host)] if st.job_differs else []
    parts += [text for text, style in extra_lines(st, now) if style != DIM]
    if st.terminal and st.message:  # its verdict's words (what was left out, and why)
        parts.append(st.message)
    return out + "".join(f" | {x}" for x in parts) + (f" | {note}" if note else "")
