"""The report as one self-contained HTML page: the tables, and matplotlib plots embedded as base64 PNG.
matplotlib (the `report` extra) is imported only here, only when plots are drawn."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..task.cases import natural
from .scores import TURN_CATEGORIES, TrajectoryScore
from .stats import wilson
from .tables import NOT_JUDGED, SPEED_OF_LIGHT, SPEEDUP, Figure, Table, cells, columns, correct, key, tally, verified

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f0f0f0; }
p.note { color: #555; font-size: 0.9em; }
img { max-width: 100%; }
"""


class MissingMatplotlib(RuntimeError):
    """Plots were asked for without matplotlib installed."""


def render(title: str, preamble: Sequence[str], report: Sequence[Table], plots: Sequence[tuple[str, str]]) -> str:
    """The page; `plots` are (caption, base64 PNG)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        *(f"<p>{html.escape(line)}</p>" for line in preamble if line),
    ]
    for caption, png in plots:
        parts.append(f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{png}">')
        parts.append(f"<figcaption>{html.escape(caption)}</figcaption></figure>")
    for table in report:
        parts.append(f"<h2>{html.escape(table.title)}</h2>")
        if table.note:
            parts.append(f'<p class="note">{html.escape(table.note)}</p>')
        parts.append(
            "<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in table.header) + "</tr></thead><tbody>"
        )
        parts += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows]
        parts.append("</tbody></table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def plots(scores: Sequence[TrajectoryScore]) -> list[tuple[str, str]]:
    """(caption, base64 PNG) for the shares, the per-shape speedups and speed of light, and the failure mix
    per turn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as exc:
        raise MissingMatplotlib("the HTML plots need matplotlib: pip install 'pytest-ptxbench[report]'") from exc
    out = [
        (
            "Share of trajectories with a correct, and a correct and verified, kernel among those judged "
            f"(Wilson 95% intervals; {NOT_JUDGED}: a stage it needs could not run here)",
            _shares(pyplot, scores),
        )
    ]
    speedups = _per_shape(pyplot, scores, SPEEDUP, "speedup (baseline time / kernel time)")
    if speedups:
        out.append(("Speedup over the baseline per shape (each point a trajectory)", speedups))
    light = _per_shape(pyplot, scores, SPEED_OF_LIGHT, "speed of light (roofline time / kernel time)")
    if light:
        out.append(("Share of the roofline reached per shape (each point a trajectory)", light))
    if any(s.turns for s in scores):
        out.append(("What became of each turn's kernel", _failures(pyplot, scores)))
    return out


def _png(pyplot: Any, figure: Any) -> str:
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    pyplot.close(figure)
    return base64.b64encode(buffer.getvalue()).decode()


@dataclass(frozen=True)
class ShareBars:
    """One series of the share plot: a bar per cell with a kernel judged, its Wilson interval as the error
    below and above the bar, and the rows of the cells with none judged (written `not judged`, no bar)."""

    name: str
    rows: list[int]
    shares: list[float]
    errors: tuple[list[float], list[float]]
    not_judged: list[int]


def share_bars(scores: Sequence[TrajectoryScore]) -> list[ShareBars]:
    """The correct and the correct-and-verified series, one row per cell."""
    series = []
    for name, what in (("correct", correct), ("correct and verified", verified)):
        bars = ShareBars(name, [], [], ([], []), [])
        for row, group in enumerate(cells(scores, columns(scores)).values()):
            k, n = tally([s.final for s in group], what)
            if n == 0:
                bars.not_judged.append(row)
                continue
            lo, hi = wilson(k, n)
            bars.rows.append(row)
            bars.shares.append(k / n)
            bars.errors[0].append(k / n - lo)
            bars.errors[1].append(hi - k / n)
        series.append(bars)
    return series


def _shares(pyplot: Any, scores: Sequence[TrajectoryScore]) -> str:
    labels = [" / ".join(cell) for cell in cells(scores, columns(scores))]
    figure, axes = pyplot.subplots(figsize=(9, 1 + 0.5 * len(labels)))
    for offset, bars in enumerate(share_bars(scores)):
        positions = [row + offset * 0.4 for row in bars.rows]
        axes.barh(positions, bars.shares, height=0.4, xerr=bars.errors, capsize=3, label=bars.name)
        for row in bars.not_judged:
            axes.text(0.01, row + offset * 0.4, f"{bars.name}: {NOT_JUDGED}", va="center", fontsize="small")
    axes.set_yticks([i + 0.2 for i in range(len(labels))], labels)
    axes.set_ylim(-0.4, len(labels) - 0.2)  # the rows without a bar too
    axes.set_xlim(0, 1)
    axes.set_xlabel("share of trajectories")
    axes.legend(loc="lower right")
    return _png(pyplot, figure)


def _per_shape(pyplot: Any, scores: Sequence[TrajectoryScore], figure: Figure, label: str) -> str | None:
    """A figure of the timed kernels per shape, each point a trajectory; None when no kernel has it."""
    grouping = columns(scores)
    points = [
        (f"{' / '.join(key(s, grouping))}: {shape}", value)
        for s in scores
        for shape, (_, score) in s.shapes.items()
        if (value := figure.of(score)) is not None
    ]
    if not points:
        return None
    names = sorted({name for name, _ in points}, key=natural)
    plot, axes = pyplot.subplots(figsize=(9, 1 + 0.35 * len(names)))
    axes.scatter([value for _, value in points], [names.index(name) for name, _ in points])
    axes.axvline(1.0, color="grey", linestyle="--")
    axes.set_yticks(range(len(names)), names)
    axes.set_xlabel(label)
    return _png(pyplot, plot)


def _failures(pyplot: Any, scores: Sequence[TrajectoryScore]) -> str:
    """One panel per model (and language, as the failure table has them)."""
    panels = sorted(cells([s for s in scores if s.turns], columns(scores, ("model",))).items())
    figure, all_axes = pyplot.subplots(len(panels), 1, figsize=(9, 2.5 * len(panels)), squeeze=False)
    for (panel, group), (axes,) in zip(panels, all_axes, strict=True):
        turns = max(len(s.turns) for s in group)
        bottom = [0] * turns
        for category in TURN_CATEGORIES:
            counts = [sum(1 for s in group if len(s.turns) > t and s.turns[t] == category) for t in range(turns)]
            if any(counts):
                axes.bar(range(1, turns + 1), counts, bottom=bottom, label=category)
                bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        axes.set_title(" / ".join(panel))
        axes.set_xlabel("turn")
        axes.set_ylabel("kernels")
        axes.set_xticks(range(1, turns + 1))
        axes.legend(fontsize="small", loc="upper right")
    return _png(pyplot, figure)
