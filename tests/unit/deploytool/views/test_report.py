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


def test_a_running_job_whose_runner_finished_nothing_lately_gives_its_mean_as_status_does():
    from remote.common.answers import ReportAnswer, ReportHistory
    from remote.common.status import JobView

    data = ReportAnswer(status=JobView(state="running"), history=ReportHistory(mean_tps=507.0))
    assert report._rate(data) == "507 tok/s on average (nothing finished in the last minute)"
    data.status.tokens_per_s = 900.0
    assert report._rate(data) == "900 tok/s now"
    data.status.stage, data.status.tokens_per_s = "draft", 0.0  # the mean is the answers' stage's
    assert report._rate(data) == "0 tok/s now"
