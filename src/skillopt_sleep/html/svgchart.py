"""The learning curve as inline SVG, drawn by hand.

Why not a charting library: the page must open from disk with no network and no script, and
the one chart it needs (two score lines over nights, stacked edit counts under them) is about a
hundred lines of coordinates. A plotting library would add a heavy dependency (matplotlib) or a
JavaScript runtime (Vega, Plotly) for that, and its SVG would carry fonts and ids we would have
to audit for the no-secret, no-network rules anyway. Every value drawn is a number we format, and
every label passes through :func:`markupsafe.escape`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

__all__ = [
    "BASELINE_COLOUR",
    "CANDIDATE_COLOUR",
    "COUNT_COLOURS",
    "CurvePoint",
    "describe",
    "learning_curve",
]

BASELINE_COLOUR = "#1f5fa8"  # adopted documents: solid line, filled dots
CANDIDATE_COLOUR = "#c2410c"  # staged documents: dashed line, hollow squares
COUNT_COLOURS = (("kept", "#15803d"), ("rejected", "#b91c1c"), ("untested", "#6b7280"))


@dataclass(frozen=True, slots=True, kw_only=True)
class CurvePoint:
    """One night on the curve; scores are ``None`` when the night measured nothing."""

    night: int
    baseline: float | None
    candidate: float | None
    kept: int = 0
    rejected: int = 0
    untested: int = 0


@dataclass(frozen=True, slots=True)
class _Frame:
    width: int
    left: int
    right: int
    top: int
    score_height: int
    gap: int
    count_height: int

    @property
    def plot_width(self) -> int:
        return self.width - self.left - self.right

    @property
    def count_top(self) -> int:
        return self.top + self.score_height + self.gap

    @property
    def height(self) -> int:
        return self.count_top + self.count_height + 40


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _x(frame: _Frame, index: int, n: int) -> float:
    step = frame.plot_width / max(n, 1)
    return frame.left + step * (index + 0.5)


def _y_score(frame: _Frame, score: float) -> float:
    clamped = max(0.0, min(1.0, score))
    return frame.top + frame.score_height * (1.0 - clamped)


def _axes(frame: _Frame, max_count: int) -> list[str]:
    out = []
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = _num(_y_score(frame, tick))
        out.append(
            f'<line x1="{frame.left}" x2="{frame.width - frame.right}" y1="{y}" y2="{y}" '
            'stroke="#d4d4d8" stroke-width="1"/>'
            f'<text x="{frame.left - 6}" y="{y}" dy="4" text-anchor="end" font-size="11" '
            f'fill="#3f3f46">{tick:.2f}</text>'
        )
    out.append(
        f'<text x="12" y="{frame.top + frame.score_height / 2:.0f}" font-size="11" '
        f'fill="#3f3f46" transform="rotate(-90 12 {frame.top + frame.score_height / 2:.0f})" '
        'text-anchor="middle">score</text>'
    )
    base = frame.count_top + frame.count_height
    out.append(
        f'<line x1="{frame.left}" x2="{frame.width - frame.right}" y1="{base}" y2="{base}" '
        'stroke="#a1a1aa" stroke-width="1"/>'
        f'<text x="{frame.left - 6}" y="{base}" dy="4" text-anchor="end" font-size="11" '
        'fill="#3f3f46">0</text>'
        f'<text x="{frame.left - 6}" y="{frame.count_top}" dy="4" text-anchor="end" '
        f'font-size="11" fill="#3f3f46">{max_count}</text>'
        f'<text x="12" y="{frame.count_top + frame.count_height / 2:.0f}" font-size="11" '
        f'fill="#3f3f46" text-anchor="middle" transform="rotate(-90 12 '
        f'{frame.count_top + frame.count_height / 2:.0f})">edits</text>'
    )
    return out


def _line(frame: _Frame, points: Sequence[CurvePoint], attr: str, dashed: bool) -> list[str]:
    """The series as polylines broken where a night has no score, plus a marker per night."""
    colour = CANDIDATE_COLOUR if dashed else BASELINE_COLOUR
    n = len(points)
    runs: list[list[str]] = [[]]
    marks: list[str] = []
    for i, p in enumerate(points):
        score = getattr(p, attr)
        if score is None:
            runs.append([])
            continue
        x, y = _num(_x(frame, i, n)), _num(_y_score(frame, score))
        runs[-1].append(f"{x},{y}")
        if dashed:
            marks.append(
                f'<rect x="{_num(float(x) - 4)}" y="{_num(float(y) - 4)}" width="8" height="8" '
                f'fill="#ffffff" stroke="{colour}" stroke-width="2"/>'
            )
        else:
            marks.append(f'<circle cx="{x}" cy="{y}" r="4.5" fill="{colour}"/>')
    dash = ' stroke-dasharray="6 4"' if dashed else ""
    lines = [
        f'<polyline points="{" ".join(run)}" fill="none" stroke="{colour}" '
        f'stroke-width="2.5"{dash}/>'
        for run in runs
        if len(run) > 1
    ]
    return lines + marks


def _bars(frame: _Frame, points: Sequence[CurvePoint], max_count: int) -> list[str]:
    n = len(points)
    width = max(4.0, min(28.0, frame.plot_width / max(n, 1) * 0.5))
    out = []
    for i, p in enumerate(points):
        x = _x(frame, i, n) - width / 2
        y = float(frame.count_top + frame.count_height)
        for (_, colour), value in zip(COUNT_COLOURS, (p.kept, p.rejected, p.untested), strict=True):
            if value <= 0:
                continue
            h = frame.count_height * value / max_count
            y -= h
            out.append(
                f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(width)}" height="{_num(h)}" '
                f'fill="{colour}"/>'
            )
    return out


def _night_labels(frame: _Frame, points: Sequence[CurvePoint]) -> list[str]:
    n = len(points)
    every = max(1, -(-n // 16))  # at most 16 labels
    y = frame.count_top + frame.count_height + 16
    out = [
        f'<text x="{_num(_x(frame, i, n))}" y="{y}" text-anchor="middle" font-size="11" '
        f'fill="#3f3f46">{p.night}</text>'
        for i, p in enumerate(points)
        if i % every == 0 or i == n - 1
    ]
    out.append(
        f'<text x="{frame.left + frame.plot_width / 2:.0f}" y="{y + 18}" text-anchor="middle" '
        'font-size="11" fill="#3f3f46">night</text>'
    )
    return out


def _legend(frame: _Frame) -> list[str]:
    y = 14
    x = frame.left
    items = [
        f'<circle cx="{x + 6}" cy="{y - 4}" r="4.5" fill="{BASELINE_COLOUR}"/>'
        f'<text x="{x + 16}" y="{y}" font-size="12" fill="#18181b">adopted documents</text>',
        f'<rect x="{x + 156}" y="{y - 8}" width="8" height="8" fill="#ffffff" '
        f'stroke="{CANDIDATE_COLOUR}" stroke-width="2"/>'
        f'<text x="{x + 170}" y="{y}" font-size="12" fill="#18181b">staged documents</text>',
    ]
    cx = x + 300
    for label, colour in COUNT_COLOURS:
        items.append(
            f'<rect x="{cx}" y="{y - 9}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{cx + 14}" y="{y}" font-size="12" fill="#18181b">{label}</text>'
        )
        cx += 24 + 8 * len(label)
    return items


def describe(points: Sequence[CurvePoint]) -> str:
    """The chart in words, for screen readers (the page also has the same data as a table)."""
    if not points:
        return "No night has been scored yet."

    def score(value: float | None) -> str:
        return "not measured" if value is None else f"{value:.3f}"

    parts = [
        f"night {p.night}: adopted {score(p.baseline)}, staged {score(p.candidate)}, "
        f"{p.kept} kept, {p.rejected} rejected, {p.untested} untested"
        for p in points[-20:]
    ]
    lead = f"{len(points)} night(s)" + (", the last 20 listed" if len(points) > 20 else "")
    return f"Learning curve over {lead}: " + "; ".join(parts) + "."


def learning_curve(points: Sequence[CurvePoint], *, title: str, width: int = 760) -> Markup:
    """An accessible SVG: ``role="img"`` with a title and a description of every point."""
    frame = _Frame(width=width, left=48, right=16, top=28, score_height=190, gap=22,
                   count_height=70)  # fmt: skip
    max_count = max((p.kept + p.rejected + p.untested for p in points), default=0) or 1
    body = [
        *_axes(frame, max_count),
        *_bars(frame, points, max_count),
        *_line(frame, points, "baseline", dashed=False),
        *_line(frame, points, "candidate", dashed=True),
        *_night_labels(frame, points),
        *_legend(frame),
    ]
    if not points:
        body.append(
            f'<text x="{frame.left + frame.plot_width / 2:.0f}" y="{frame.top + 90}" '
            'text-anchor="middle" font-size="14" fill="#52525b">no scored night yet</text>'
        )
    head = (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'viewBox="0 0 {frame.width} {frame.height}" width="{frame.width}" '
        f'height="{frame.height}" aria-labelledby="curve-title curve-desc">'
        f'<title id="curve-title">{escape(title)}</title>'
        f'<desc id="curve-desc">{escape(describe(points))}</desc>'
        f'<rect x="0" y="0" width="{frame.width}" height="{frame.height}" fill="#ffffff"/>'
    )
    return Markup(head + "".join(body) + "</svg>")
