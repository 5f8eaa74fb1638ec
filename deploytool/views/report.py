"""`invoke report`: one self-contained HTML page (inline SVG, inline CSS, nothing fetched) from what
`python -m remote ctl report` gathered on the host."""

from __future__ import annotations

import html
import time
from pathlib import Path

from remote.common.answers import Histogram, RecoverEvent, ReportAnswer, ReportDataset, ReportStage
from remote.common.caps import fmt_bytes
from remote.common.speed import MEAN_TEXT, job_rate
from remote.common.status import BUDGET_REACHED, NOT_RUN

from .progress import beyond_text, fmt_duration, fmt_tokens

W, H, PAD = 640, 180, 36  # chart size and margin, in SVG units
CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px;
       color: #1d2330; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { font-size: 1.15em; margin-top: 2em; }
.sub { color: #5b6577; } table { border-collapse: collapse; margin: .5em 0; }
td, th { padding: .25em .8em; border-bottom: 1px solid #e2e5ea; text-align: right; }
th { background: #f4f6f8; } td:first-child, th:first-child { text-align: left; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(430px, 1fr)); gap: 1.2em; }
.card { border: 1px solid #e2e5ea; border-radius: 6px; padding: .6em .8em; }
.card h3 { margin: 0 0 .3em; font-size: 1em; } svg { width: 100%; height: auto; }
.wide { max-width: 900px; }
.axis { stroke: #9aa3b2; stroke-width: 1; } .bar { fill: #4f7fd9; } .line { fill: none; stroke: #2f6bd8;
  stroke-width: 1.5; } .cap { stroke: #c0392b; stroke-dasharray: 4 3; } .mean { stroke: #27864f;
  stroke-dasharray: 2 3; } .start { stroke: #e08a00; stroke-dasharray: 3 3; }
text { font-size: 11px; fill: #5b6577; } .bad { color: #b3261e; } code { font-size: 12px; }
.share { display: flex; height: 14px; border-radius: 3px; overflow: hidden; min-width: 160px; }
"""
FINISH_COLORS = {"stop": "#27864f", "length": "#c0392b"}


def _svg(body: str, title: str) -> str:
    return (
        f'<svg viewBox="0 0 {W} {H}" role="img" aria-label="{html.escape(title)}">'
        f"<title>{html.escape(title)}</title>{body}</svg>"
    )


def _axes(x_label: str, y_max: float, y_label: str, fmt=fmt_tokens) -> str:
    return (
        f'<line class="axis" x1="{PAD}" y1="{H - PAD}" x2="{W - 8}" y2="{H - PAD}"/>'
        f'<line class="axis" x1="{PAD}" y1="8" x2="{PAD}" y2="{H - PAD}"/>'
        f'<text x="{W - 8}" y="{H - 8}" text-anchor="end">{html.escape(x_label)}</text>'
        f'<text x="{PAD + 4}" y="14">{html.escape(y_label)}</text>'
        f'<text x="{PAD - 4}" y="{H - PAD}" text-anchor="end">0</text>'
        f'<text x="{PAD - 4}" y="28" text-anchor="end">{html.escape(fmt(y_max))}</text>'
    )


RATE_TITLE = (
    "response tokens per second over the job's life (from when each record was written; a gap: "
    "no record for two minutes or more); dashed: runner (re)starts"
)
ROWS_RATE_TITLE = (
    "tokens in hidden-states rows per second over the stage's life (from when each row counted; a "
    "gap: no row for two minutes or more); dashed: runner (re)starts"
)


LOSS_TITLE = (
    "the draft's training loss at each step the trainer logged, over the stage's life; a gap: "
    "no step for two minutes or more (a restart resumes from its last checkpoint)"
)


def throughput_chart(
    points: list, starts: list, title: str = RATE_TITLE, unit: str = "tok/s", fmt=fmt_tokens
) -> str:
    if len(points) < 2:
        return "<p class='sub'>Not enough made yet to draw a rate over time.</p>"
    t0 = min([points[0][0], *starts])  # a start just before the first minute line is still shown
    t1 = max(points[-1][0], t0 + 1)
    top = max(p[1] or 0 for p in points) or 1.0

    def x(t):
        return PAD + (t - t0) / (t1 - t0) * (W - PAD - 8)

    def y(v):
        return H - PAD - v / top * (H - PAD - 28)

    runs, cur = [], []  # a line per stretch the job ran; an idle gap (null) breaks it
    for t, v in points:
        if v is None:
            runs, cur = runs + [cur] if cur else runs, []
        else:
            cur.append(f"{x(t):.1f},{y(v):.1f}")
    runs += [cur] if cur else []
    lines = "".join(f'<polyline class="line" points="{" ".join(r)}"/>' for r in runs)
    marks = "".join(
        f'<line class="start" x1="{x(s):.1f}" y1="20" x2="{x(s):.1f}" y2="{H - PAD}"/>'
        for s in starts
        if t0 <= s <= t1
    )
    span = f"{fmt_duration(t1 - t0)} from {time.strftime('%Y-%m-%d %H:%M', time.localtime(t0))}"
    return _svg(_axes(span, top, unit, fmt) + marks + lines, title)


def _text_w(text: str) -> float:
    return 6.2 * len(text)  # 11px text, in SVG units: near enough to keep labels apart


def _label(x: float, text: str, placed: list) -> str:
    """A line's label beside it, on the side where it fits, in the upper of two rows above the bars
    unless it overlaps a label already there (`placed`: (row, left, right) boxes, appended to)."""
    w = _text_w(text)
    left, anchor = (x - 3 - w, "end") if x - 3 - w >= PAD + 2 else (x + 3, "start")
    row = 14 if not any(r == 14 and left < b and a < left + w for r, a, b in placed) else 26
    placed.append((row, left, left + w))
    tx = x - 3 if anchor == "end" else x + 3
    return f'<text x="{tx:.1f}" y="{row}" text-anchor="{anchor}">{html.escape(text)}</text>'


def histogram_chart(name: str, d: ReportDataset, max_tokens: int | None) -> str:
    title = f"{name}: response length in tokens ({d.records:,} records)"
    return _bars(
        d.hist, "records", title, ((max_tokens, "cap", "max_tokens"), (d.mean, "mean", "mean"))
    )


def _bars(hist: Histogram, unit: str, title: str, lines=()) -> str:
    """Bars of a histogram, with (value, class, name) lines marked and labelled above them."""
    counts, width = hist.counts, hist.width
    top = max(counts) or 1
    span = width * len(counts)
    bw = (W - PAD - 8) / len(counts)
    bars = "".join(
        f'<rect class="bar" x="{PAD + i * bw + 0.5:.1f}" y="{H - PAD - c / top * (H - PAD - 28):.1f}" '
        f'width="{max(bw - 1, 0.5):.1f}" height="{c / top * (H - PAD - 28):.1f}"><title>{i * width:,}–'
        f"{(i + 1) * width:,} tokens: {c:,}</title></rect>"
        for i, c in enumerate(counts)
        if c
    )

    marks, placed = "", [(14, PAD + 4, PAD + 4 + _text_w(unit))]  # the y axis' name
    for v, cls, label in lines:
        if v:
            xv = PAD + min(v, span) / span * (W - PAD - 8)
            marks += f'<line class="{cls}" x1="{xv:.1f}" y1="20" x2="{xv:.1f}" y2="{H - PAD}"/>'
            marks += _label(xv, f"{label} {v:,.0f}", placed)
    return _svg(_axes(f"tokens (0–{span:,})", top, unit) + bars + marks, title)


def finish_share(finish: dict) -> str:
    total = sum(finish.values())
    if not total:
        return "-"
    most = sorted(finish.items(), key=lambda kv: -kv[1])
    parts = "".join(
        f'<span style="width:{n / total:.1%};background:{FINISH_COLORS.get(k, "#8e7cc3")}" '
        f'title="{html.escape(k)}: {n:,} ({n / total:.1%})"></span>'
        for k, n in most
    )
    words = ", ".join(f"{html.escape(k)} {n / total:.1%}" for k, n in most)
    return f'<div class="share">{parts}</div><span class="sub">{words}</span>'


def restarts_table(events: list[RecoverEvent]) -> str:
    """What the watcher did: each death it saw, each restart, a give-up (run/recover.jsonl)."""
    if not events:
        # a runner killed in a stop's grace is no event: the stop wanted it down
        return "<p>None: the watcher restarted nothing (nothing died or wedged while meant to run).</p>"
    done = sum(1 for e in events if e.event == "restarted")
    gave_up = '<span class="bad">gave up</span>'
    rows = "".join(
        f"<tr><td>{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(e.at))}</td>"
        f"<td>{html.escape(e.what)}</td>"
        f"<td>{gave_up if e.event == 'gave_up' else html.escape(e.event)}"
        f"</td><td style='text-align:left'>{html.escape(e.why or '')}"
        # a give-up: the last lines of the log that said why
        + "".join(f'<br><span class="sub">{html.escape(x)}</span>' for x in (e.log or [])[-3:])
        + "</td></tr>"
        for e in events
    )
    return (
        f'<p class="sub">{done} restart(s).</p><table><tr><th>when</th><th>what</th><th>event</th>'
        f'<th style="text-align:left">why</th></tr>{rows}</table>'
    )


def _shape(g: ReportStage) -> str:
    if g.layers is None:
        return "-"
    return f"{g.layers} × {g.hidden:,} × {html.escape(str(g.dtype))}"


def train_section(data: ReportAnswer) -> str:
    curve = data.train_curve
    if not curve.points:
        return "<p>No training yet (<code>invoke restart --stage train</code>).</p>"
    chart = throughput_chart(curve.points, curve.starts, LOSS_TITLE, "loss", lambda v: f"{v:.2f}")
    return f'<div class="card wide">{chart}</div>'


def drafts_section(data: ReportAnswer) -> str:
    """The drafts the draft stage measured, side by side: per dataset, each draft's mean acceptance
    length by vLLM's counters (its acceptance by position, and the held-out prompts answered, on
    hover) and the output tokens per second of its answers."""
    if not data.drafts:
        return (
            "<p>None measured yet: name a draft in hosts.yaml (<code>server.draft</code>) and "
            "<code>invoke restart --stage draft</code>.</p>"
        )
    names = list(dict.fromkeys(n for d in data.drafts for n in d.datasets))
    head = "".join(
        f"<th>{html.escape(d.model)}<br><span class='sub'>"
        + (
            "no draft (baseline)"
            if d.baseline
            else f"{html.escape(d.method)}, k={d.num_speculative_tokens}"
        )
        + f" · {html.escape(d.tag)}</span></th>"
        for d in data.drafts
    )

    def speed(r) -> float | None:
        return r.tokens / r.seconds if r and r.seconds >= 1 else None

    rows = []
    for name in names:
        base = next((speed(d.datasets.get(name)) for d in data.drafts if d.baseline), None)
        cells = []
        for d in data.drafts:
            r, rate = d.datasets.get(name), speed(d.datasets.get(name))
            cell = f"{fmt_tokens(rate)} tok/s" if rate else ""
            if d.baseline:
                cells.append(f"<td>{cell or '-'}</td>")
                continue
            length = r.counts.mean_acceptance_length if r else None
            if length is None:
                cells.append("<td>-</td>")
                continue
            if rate and base:  # the speedup at the job's concurrency, on the same prompts
                cell += f" (×{rate / base:.2f} the baseline)"
            by = r.counts.by_position(", ") if r.counts else "-"
            tip = f"by position {by}; {r.answered:,} held-out prompts answered"
            cells.append(
                f'<td title="{html.escape(tip)}"><b>{length:.2f}</b>{" · " + cell if cell else ""}</td>'
            )
        rows.append(f"<tr><td>{html.escape(name)}</td>{''.join(cells)}</tr>")
    return (
        "<p class='sub'>Mean acceptance length (1 + accepted / drafts: the tokens a target step "
        "makes) on each dataset's held-out prompts, from vLLM's own counters; hover a cell for the "
        "acceptance by draft position.</p>"
        f"<table><tr><th>dataset</th>{head}</tr>{''.join(rows)}</table>"
    )


def stage_section(data: ReportAnswer) -> str:
    """The hidden-states stage: its rows per dataset, their bytes on the host and taken off it, its
    rate over its life, the rows' lengths."""
    if not data.stage:
        return (
            "<p>Not run yet: <code>invoke restart --stage hidden-states</code> makes the target's "
            "hidden states of every reply kept.</p>"
        )
    rows = []
    for name, g in data.stage.items():
        to_make = f"{g.target:,}" if g.target is not None else "-"
        failed = f'<span class="bad">{g.failed:,}</span>' if g.failed else "0"
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{g.rows:,}</td><td>{to_make}</td><td>{failed}</td>"
            f"<td>{fmt_tokens(g.tokens)}</td><td>{fmt_tokens(g.trained)}</td><td>{_shape(g)}</td>"
            f"<td>{fmt_bytes(g.bytes)}</td><td>{fmt_bytes(g.on_host)}</td>"
            f"<td>{g.freed:,} ({fmt_bytes(g.freed_bytes)})</td></tr>"
        )
    on_host = sum(g.on_host for g in data.stage.values())
    freed = sum(g.freed_bytes for g in data.stage.values())
    hist = data.stage_history
    rate = f"{fmt_tokens(hist.mean_tps)} tok/s on average while it ran" if hist.mean_tps else ""
    cards = "".join(
        f'<div class="card"><h3>{html.escape(n)}</h3>'
        + _bars(
            g.hist,
            "rows",
            f"{n}: row length in tokens ({g.rows:,} rows)",
            ((g.tokens / g.rows if g.rows else None, "mean", "mean"),),
        )
        + "</div>"
        for n, g in data.stage.items()
    )
    return f"""<p class="sub">{fmt_bytes(on_host)} on the host · {fmt_bytes(freed)} taken off it by
<code>invoke pull --hidden-states --free</code>{(" · " + rate) if rate else ""}</p>
<table><tr><th>dataset</th><th>rows</th><th>rows to make</th><th>failed</th><th>tokens in rows</th>
<th>trained tokens</th><th>layers × hidden × dtype</th><th>bytes</th><th>on the host</th>
<th>taken off (rows, bytes)</th></tr>{"".join(rows)}</table>
<p class="sub">Trained tokens: under the loss mask (the target's replies). A row taken off the host stays
counted: the stage never makes it again.</p>
<div class="card wide">{throughput_chart(hist.points, hist.starts, ROWS_RATE_TITLE)}</div>
<div class="grid">{cards}</div>"""


def _run_share(st, ds: dict) -> str:
    """Where --datasets leaves some out: the tokens of those run, the figure status totals (the
    report reads every dataset's records, as export does)."""
    if not st.not_run:
        return ""
    run = sum(d.tokens for name, d in ds.items() if name not in st.not_run)
    return f" ({fmt_tokens(run)} in the datasets run)"


def _rate(data: ReportAnswer) -> str:
    """The answers' rate as status says it (`job_rate`); in another stage, the answers' mean from
    their records' times (status.json holds that stage's rates)."""
    st = data.status
    if st.stage_spec.makes_rows and not st.terminal:
        return f"hidden-states rows at {st.samples_per_s:,.1f} rows/s now"
    if not st.stage_spec.makes_answers:
        mean = data.history.mean_tps
        return f"answers made at {fmt_tokens(mean)} tok/s on average" if mean else "no rate yet"
    rate, mean = job_rate(st.state, st.tokens_per_s, st.mean_tokens_per_s)
    if rate is None:
        return "no rate yet"
    return f"{fmt_tokens(rate)} tok/s, " + (MEAN_TEXT if mean else "the last minute's")


def starts_text(by_stage: dict[str, int], answers: int) -> str:
    """Every stage's runner starts, each stage's said where more than the answers' ran
    (`answers`: their count, from a host that does not say each stage's)."""
    total = sum(by_stage.values()) or answers
    if len(by_stage) <= 1:
        return f"{total} runner start(s)"
    each = ", ".join(f"{n} {stage}" for stage, n in by_stage.items())
    return f"{total} runner starts ({each})"


def records_text(records: int, beyond: int) -> str:
    return f"{records:,}" + (f" ({beyond_text(beyond).strip()})" if beyond else "")


def page(data: ReportAnswer) -> str:
    st, host, max_tokens, ds = data.status, data.host, data.max_tokens, data.datasets
    rows = []
    for name, d in ds.items():
        sd = st.datasets.get(name) if st.stage_spec.makes_answers else None  # else the stage's rows
        cap = f"{d.target:,}" if d.target is not None else "-"
        if name in st.not_run:  # as status says it (its records still read here, as export's)
            cap = NOT_RUN + (f" <span class='sub'>(cap {d.target:,})</span>" if d.target else "")
        budget = fmt_tokens(sd.budget) if sd and sd.budget else "-"
        if sd and sd.state_label == BUDGET_REACHED:  # it ended the dataset, not its cap
            budget += f" <span class='sub'>(reached: {sd.done:,} of {sd.target:,})</span>"
        mean = f"{d.mean:,.0f}" if d.mean else "-"
        err = f'<span class="bad">{d.errors:,}</span>' if d.errors else "0"
        rows.append(
            f"<tr><td>{html.escape(name)}</td><td>{records_text(d.records, d.beyond)}</td>"
            f"<td>{cap}</td><td>{budget}</td>"
            f"<td>{fmt_tokens(d.tokens)}</td><td>{mean}</td><td style='text-align:left'>"
            f"{finish_share(d.finish)}</td><td>{err}</td></tr>"
        )
    cards = "".join(
        f'<div class="card"><h3>{html.escape(n)}</h3>{histogram_chart(n, d, max_tokens)}</div>'
        for n, d in ds.items()
    )
    errs = "".join(
        f"<h3>{html.escape(n)}: {d.errors:,} errors (last {len(d.last_errors)})</h3><ul>"
        + "".join(f"<li><code>{html.escape(e)}</code></li>" for e in d.last_errors)
        + "</ul>"
        for n, d in ds.items()
        if d.errors
    )
    hist = data.history
    made = time.strftime("%Y-%m-%d %H:%M:%S")
    rate = _rate(data)
    said = st.state_label  # as status says it (stopping, recovering), not the file's word
    state = f"stage {label}: {said}" if (label := st.stage_spec.label) else said
    answers = sum(d.tokens for d in ds.values())
    restarts = restarts_table(data.restarts)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>deploytool report: {html.escape(host)}</title><style>{CSS}</style></head><body>
<h1>{html.escape(host)}: {html.escape(state)}</h1>
<p class="sub">Made {made} · {fmt_tokens(answers)} response tokens{_run_share(st, ds)} · {rate} ·
{html.escape(starts_text(data.runner_starts, len(hist.starts)))} · model {html.escape(st.engine.model or "?")}
{(" · " + html.escape(st.message)) if st.message else ""}</p>
<h2>Caps, records and tokens</h2>
<table><tr><th>dataset</th><th>records</th><th>cap (target)</th><th>token budget</th><th>tokens</th>
<th>mean length</th><th style="text-align:left">finish_reason</th><th>errors</th></tr>{"".join(rows)}</table>
<h2>Tokens per second over the job's life</h2>
<div class="card wide">{throughput_chart(hist.points, hist.starts)}
<span class="sub">Orange dashed: a runner (re)start.</span></div>
<h2>Response length per dataset</h2>
<p class="sub">Bars: records per length band. Red dashed: <code>max_tokens</code> (answers cut there end with
finish_reason <code>length</code>). Green dotted: the mean.</p><div class="grid">{cards}</div>
<h2>Errors</h2>{errs or "<p>None.</p>"}
<h2>Recoveries by the host's watcher</h2>{restarts}
<h2>Hidden-states stage</h2>{stage_section(data)}
<h2>The draft's training</h2>{train_section(data)}
<h2>Drafts measured</h2>{drafts_section(data)}
</body></html>
"""


def write(data: ReportAnswer, out: Path) -> Path:
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(page(data))
    tmp.replace(out)
    return out
