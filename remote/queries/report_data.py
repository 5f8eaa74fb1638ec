"""What `invoke report` draws, gathered on the host in one pass: status, the tokens/s history, and per
dataset the response-length histogram and finish_reason shares (read from the outputs' record heads),
the errors. One JSON answer; the page itself is made on the local side."""

from __future__ import annotations

import collections
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..common.answers import Histogram, RecoverEvent, ReportAnswer, ReportDataset, ReportHistory
from ..common.caps import Target
from ..common.codec import read_json, typed_lines
from ..common.jobspec import Paths, deployed_spec
from ..common.protocol import CtlReport
from ..common.records import ErrorLine, Record, TrainStep
from ..common.stages import FIRST
from ..common.stages import stage_of as spec_of
from ..common.state import job_now, kept_caps
from ..job.store import history
from ..job.store.prompts import dataset_target
from ..job.store.rates import IDLE_GAP_S, ActiveTime
from .report_drafts import drafts_measured
from .report_stage import stage_of

_HEAD = re.compile(
    rb'^\{"id": ("(?:[^"\\]|\\.)*"), "dataset": "[^"]*", '
    rb'(?:"index": (\d+|null), )?"finish_reason": ("[^"]*"|null), '
    rb'"usage": \{"prompt_tokens": -?\d+, "completion_tokens": (\d+)'
)
BINS = 40
LAST_ERRORS = 5


_CREATED = re.compile(rb'"created": (\d+)')
SERIES_POINTS = 60  # the throughput chart's points (fewer for a job shorter than a minute)
SERIES_MIN_BIN_S = 1.0  # `created` is in whole seconds


def _created(line: bytes) -> int | None:
    """A record's `created`, found from the line's end: it follows the conversation, and only the
    token ids and the continuation count come after it."""
    at = line.rfind(b'"created": ')
    m = _CREATED.match(line, at) if at >= 0 else None
    return int(m.group(1)) if m else None


@dataclass
class Scanned:
    lengths: list[int] = field(default_factory=list)  # response tokens of each record in the cap
    finish: collections.Counter = field(default_factory=collections.Counter)
    beyond: int = 0  # records beyond the cap (caps.Target)


def scan_outputs(path: Path, target: Target, made: collections.Counter) -> Scanned:
    """Response lengths and finish_reason counts of the records `target` holds (heads only: no
    conversation is parsed); `made` gets each record's response tokens at the second it was
    written, every record's (the engine made them all)."""
    got, seen = Scanned(), set()
    try:
        with open(path, "rb") as f:
            for line in f:
                m = _HEAD.search(line, 0, 400)
                if m is None:
                    try:
                        rec = Record.from_json(json.loads(line))
                    except (ValueError, KeyError, TypeError):
                        continue  # a torn last line
                    rid, index = rec.id, rec.index
                    n, finish = rec.completion_tokens, str(rec.finish_reason)
                    t = rec.created or None
                else:
                    rid = json.loads(m.group(1))
                    index = None if m.group(2) in (None, b"null") else int(m.group(2))
                    n, finish = int(m.group(4)), json.loads(m.group(3)) or "None"
                    t = _created(line)
                if t is not None:
                    made[t] += n
                if rid in seen:  # an id written twice counts once (its first), as resume keeps it
                    continue
                seen.add(rid)
                if not target.holds(rid, index):
                    got.beyond += 1
                    continue
                got.lengths.append(n)
                got.finish[finish] += 1
    except FileNotFoundError:
        pass
    return got


def active_seconds(made: collections.Counter) -> float:
    """The seconds the job was making records: the span, less every gap of IDLE_GAP_S or more
    between two records (a job stopped overnight, a restart with nothing to do)."""
    times = sorted(made)  # the records' write times: all the report's files hold of the past
    return 1.0 + sum(b - a for a, b in zip(times, times[1:]) if b - a < IDLE_GAP_S)


def throughput(made: collections.Counter) -> tuple[list[list[float]], float | None]:
    """Response tokens per second over the job's life, measured from the records themselves (when
    each was written, and its tokens): (points [bin middle, tok/s], the mean tok/s over the time
    it ran). A bin inside an idle gap is a null point: the chart leaves a gap there instead of a
    line down to zero. A job of a few seconds still has a line."""
    if not made:
        return [], None
    t0, t1 = min(made), max(made) + 1
    width = max(SERIES_MIN_BIN_S, (t1 - t0) / SERIES_POINTS)
    bins = [0] * (int((t1 - t0) // width) + 1)
    for t, n in made.items():
        bins[int((t - t0) // width)] += n
    times = sorted(made)
    idle = [(a, b) for a, b in zip(times, times[1:]) if b - a >= IDLE_GAP_S]
    points = []
    for i, n in enumerate(bins):
        lo, hi = t0 + i * width, t0 + (i + 1) * width
        inside_gap = not n and any(a < lo and hi <= b for a, b in idle)
        points.append([t0 + (i + 0.5) * width, None if inside_gap else n / width])
    return points, sum(made.values()) / active_seconds(made)


def stage_mean(paths: Paths) -> float | None:
    """The hidden-states stage's tokens in rows over the time its rows were being made, every
    runner's (its made.json): the figure status gives, where a row's seconds are not whole."""
    made = ActiveTime.of_kept((read_json(paths.hidden_made) or {}).get(""))
    return made.per_s(0.0) if made is not None else None


def loss_curve(paths: Paths) -> ReportHistory:
    """The train stage's loss at each step its trainer logged (its metrics-<rows>.jsonl), at most
    SERIES_POINTS of them (every n-th), a gap where no step came for IDLE_GAP_S (a restart)."""
    now = paths.training_now()  # the training under way, or the last
    steps = [(m.t, m.loss) for m in typed_lines(now["metrics"], TrainStep)] if now else []
    every = max(1, len(steps) // SERIES_POINTS)
    points, last = [], None
    for t, loss in steps[::every]:
        if last is not None and t - last >= IDLE_GAP_S:
            points.append([(t + last) / 2, None])
        points.append([t, loss])
        last = t
    return ReportHistory(points, [])


def histogram(values: list[int], top: int) -> Histogram:
    top = max(1, top)
    width = max(1, -(-top // BINS))
    counts = [0] * BINS
    for v in values:
        counts[min(BINS - 1, v // width)] += 1
    return Histogram(width, counts)


def errors(path: Path) -> tuple[int, list[str]]:
    n, last = 0, collections.deque(maxlen=LAST_ERRORS)
    for e in typed_lines(path, ErrorLine):
        n += 1
        last.append(f"{e.id}: {e.error[:200]}")
    return n, list(last)


MAX_RESTARTS = 200  # the page lists the newest


def gather(paths: Paths, req: CtlReport | None = None) -> ReportAnswer:
    st = job_now(paths)
    st.token = None
    job = deployed_spec()
    max_tokens = int((job.sampling if job else {}).get("max_tokens") or 0) or None
    names = job.dataset_names() if job else list(st.datasets)
    datasets = {}
    kept = kept_caps(paths)
    made: collections.Counter = collections.Counter()
    specs = {spec.name: spec for spec in (job.datasets if job else ())}
    for name in names:
        n = kept.target(name)
        target = dataset_target(paths, specs[name], n) if name in specs else Target(n)
        got = scan_outputs(paths.output(name), target, made)
        lengths = got.lengths
        n_err, last = errors(paths.errors(name))
        top = max(max_tokens or 0, max(lengths, default=0))
        d = st.datasets.get(name) if st.stage_spec.makes_answers else None  # else the stage's rows
        datasets[name] = ReportDataset(
            records=len(lengths),
            beyond=got.beyond,
            tokens=sum(lengths),
            mean=sum(lengths) / len(lengths) if lengths else None,
            # the status's where it counts answers, else the cap over the file as it is now
            target=d.target if d else (len(target.ids) if target.ids is not None else n),
            hist=histogram(lengths, top),
            finish=dict(got.finish),
            errors=n_err,
            last_errors=last,
        )
    lines = history.read(paths.history)
    restarts = list(typed_lines(paths.recover_log, RecoverEvent))[-MAX_RESTARTS:]  # across runs
    starts = [x for x in lines if x.start is not None]
    answers = FIRST.name  # a start line names its stage where it is not the answers'
    count = collections.Counter(x.stage or answers for x in starts)
    rows = lambda name: bool(name) and spec_of(name).makes_rows  # noqa: E731
    points, mean = throughput(made)
    stage, rows_made = stage_of(paths.hidden_states, names, st)
    for got, lengths in stage.values():
        got.hist = histogram(lengths, max(lengths, default=0))
    row_points, row_mean = throughput(rows_made)
    row_mean = stage_mean(paths) or row_mean  # status's figure, where the stage kept it
    return ReportAnswer(
        train_curve=loss_curve(paths),
        drafts=drafts_measured(paths),
        stage={name: got for name, (got, _) in stage.items()},
        stage_history=ReportHistory(row_points, [x.t for x in starts if rows(x.stage)], row_mean),
        status=st,
        max_tokens=max_tokens,
        datasets=datasets,
        history=ReportHistory(points, [x.t for x in starts if not x.stage], mean),
        restarts=restarts,
        runner_starts=dict(count),
    )
