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
