"""The report's histogram: the max_tokens and mean lines' labels never on top of each other or of
the axis' name, wherever the lines fall."""

from __future__ import annotations

import re

import pytest

from deploytool.views import report
from remote.common.answers import Histogram, ReportDataset


def label_boxes(svg: str) -> list[tuple[int, float, float]]:
    """(row, left, right) of every text above the bars, as the page draws it."""
    boxes = []
    for x, y, anchor, text in re.findall(
        r'<text x="([\d.]+)" y="(\d+)"(?: text-anchor="(\w+)")?>([^<]*)</text>', svg
    ):
        if int(y) >= 28:
            continue  # the axis' numbers (left of it) and its name (below)
        w = report._text_w(text.replace("&#x27;", "'"))
        left = float(x) - w if anchor == "end" else float(x)
        boxes.append((int(y), left, left + w))
    return boxes


@pytest.mark.parametrize("mean,cap", [(7900, 8192), (300, 8192), (50, 400), (4000, 8192)])
def test_line_labels_never_overlap(mean, cap):
    d = ReportDataset(records=9, mean=mean, hist=Histogram(width=cap // 40, counts=[1] * 41))
    boxes = label_boxes(report.histogram_chart("B1", d, cap))
    assert len(boxes) == 3  # the y axis' name, max_tokens, mean
    for i, (r1, a1, b1) in enumerate(boxes):
        for r2, a2, b2 in boxes[i + 1 :]:
            assert r1 != r2 or b1 <= a2 or b2 <= a1, boxes
    assert all(left >= report.PAD - 2 and right <= report.W for _, left, right in boxes)


def test_drafts_side_by_side_with_the_speedup_over_the_baseline():
    """Each draft's acceptance length per dataset, and its answers' rate against the baseline's
    (the same prompts without a draft) as a speedup."""
    from remote.common.answers import DraftResult, ReportAnswer, ReportDraft
    from remote.common.status import DraftCounts

    def measured(tokens, drafts=0.0, accepted=0.0):
        return DraftResult(5, DraftCounts(drafts, 3 * drafts, accepted, []), tokens, 10.0)

    base = ReportDraft("baseline-kimi-1", "kimi", "none", 0, True, {"B1": measured(1_000)})
    ours = ReportDraft("ours-2", "ours", "eagle3", 3, False, {"B1": measured(2_500, 10, 20)})
    page = report.page(ReportAnswer(drafts=[base, ours]))
    section = page.split("<h2>Drafts measured</h2>")[1]
    assert "no draft (baseline)" in section and "100 tok/s" in section
    assert "<b>3.00</b> · 250 tok/s (×2.50 the baseline)" in section
    assert "None measured yet" in report.page(ReportAnswer()).split("<h2>Drafts measured</h2>")[1]


def test_a_give_up_shows_the_last_lines_of_the_log_that_said_why():
    from remote.common.answers import RecoverEvent

    log = ["loading", "torch.OutOfMemoryError: CUDA out of memory <GPU 0>", "exit 1"]
    page = report.restarts_table(
        [
            RecoverEvent(1.0, "server", "died", "exit 1"),
            RecoverEvent(2.0, "server", "gave_up", "exit 1", ["first"] + log),
        ]
    )
    assert "CUDA out of memory &lt;GPU 0&gt;" in page and "first" not in page
    assert page.count('class="sub">') == 4  # the count of restarts, and three lines of the log
    # none: what the watcher did, not a claim that nothing was killed (a stop's own kill is none)
    assert "the watcher restarted nothing" in report.restarts_table([])


def test_a_running_job_whose_runner_finished_nothing_lately_gives_its_mean_as_status_does():
    from remote.common.answers import ReportAnswer, ReportHistory
    from remote.common.status import JobView

    st = JobView(state="running", mean_tokens_per_s=507.0)
    data = ReportAnswer(status=st, history=ReportHistory(mean_tps=490.0))
    assert (
        report._rate(data) == "507 tok/s, the job's mean over the time its answers were being made"
    )
    data.status.tokens_per_s = 900.0
    assert report._rate(data) == "900 tok/s, the last minute's"
    data.status.stage = "draft"  # status holds the draft's rates: the answers' from their records
    assert report._rate(data) == "answers made at 490 tok/s on average"


def test_a_finished_job_has_one_rate_in_status_plan_and_report():
    """status.json of a job that ended keeps its last minute's rate: status printed it unstarred
    (beside starred rows), plan the runner's mean, report a mean of the records' times."""
    import io

    from rich.console import Console

    from deploytool.views import render
    from remote.common.answers import ReportAnswer, ReportHistory
    from remote.common.status import DatasetStatus, JobView
    from remote.queries.target_caps import answer_rate

    row = DatasetStatus(state="complete", done=4, target=4, tokens_per_s=0.0, mean_tokens_per_s=9e3)
    st = JobView(
        state="finished", tokens_per_s=17_700.0, mean_tokens_per_s=18_000.0, datasets={"B1": row}
    )
    buf = io.StringIO()
    render.status_screen(st, out=Console(file=buf, width=300, highlight=False), now=0.0)
    total = next(x for x in buf.getvalue().splitlines() if x.strip().startswith("total"))
    assert "18.0k* tok/s" in total and "9.0k*" in buf.getvalue()
    assert answer_rate(st) == (18_000.0, "the job's mean over the time its answers were being made")
    data = ReportAnswer(status=st, history=ReportHistory(mean_tps=17_100.0))
    assert (
        report._rate(data)
        == "18.0k tok/s, the job's mean over the time its answers were being made"
    )


def _answer(st, **rows):
    """A report's answer: each dataset's (records, target), alike otherwise."""
    from remote.common.answers import ReportAnswer

    hist = Histogram(width=100, counts=[1] * 40)
    made = {n: ReportDataset(records=r, target=t, hist=hist) for n, (r, t) in rows.items()}
    return ReportAnswer(status=st, datasets=made)


def test_a_dataset_its_token_budget_ended_short_of_its_cap_is_said_so_in_the_report():
    """status said `budget reached` (12 of 32) while the report's row read as any finished one:
    a token budget column of `60.0k` beside 12 records and a cap of 32."""
    from remote.common.status import DatasetStatus, JobView

    short = DatasetStatus(state="complete", done=12, target=32, budget=60_000, budget_reached=True)
    whole = DatasetStatus(state="complete", done=32, target=32, budget=900_000)
    st = JobView(state="finished", datasets={"B1": short, "B2": whole})
    page = report.page(_answer(st, B1=(12, 32), B2=(32, 32)))
    b1 = page[page.index("<td>B1</td>") : page.index("<td>B2</td>")]
    assert "60.0k <span class='sub'>(reached: 12 of 32)</span>" in b1
    assert "reached" not in page[page.index("<td>B2</td>") :].split("</tr>")[0]


def test_a_dataset_left_out_by_datasets_reads_not_run_as_status_says_it():
    """report's cap column read `0` for B3 and B4 while status said `not run`."""
    from remote.common.status import DatasetStatus, JobView

    st = JobView(state="finished", datasets={"B1": DatasetStatus(done=4, target=4)}, not_run=["B3"])
    data = _answer(st, B1=(4, 4), B3=(22, 22))
    page = report.page(data)
    b3 = page[page.index("<td>B3</td>") :].split("</tr>")[0]
    assert "<td>not run <span class='sub'>(cap 22)</span></td>" in b3, b3
    # its headline's tokens said beside those of the datasets run, status's total
    data.datasets["B1"].tokens, data.datasets["B3"].tokens = 400, 2_200
    assert "2.6k response tokens (400 in the datasets run)" in report.page(data)
