"""The paper-style tables of `ptxbench report`, built from trajectory scores, and their Markdown.

Each cell is a (model, target, task); its trajectories are the samples of every estimate: shares with
Wilson 95 % intervals, speedups as geometric means with a seeded bootstrap interval, the unbiased pass@k
(a trajectory passes when its kernel is correct and verified) and fast_p (correct and speedup > p)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .scores import TURN_CATEGORIES, Score, TrajectoryScore
from .stats import FAST_P, bootstrap_geomean, fast_p, geomean, pass_at_k, wilson

PASS_K = (1, 5, 10)
Cell = tuple[str, str, str]  # model, target, task


@dataclass(frozen=True)
class Table:
    title: str
    header: list[str]
    rows: list[list[str]]
    note: str = ""

    def markdown(self) -> str:
        lines = [f"## {self.title}", ""]
        if self.note:
            lines += [self.note, ""]
        lines.append("| " + " | ".join(self.header) + " |")
        lines.append("|" + "|".join(" --- " for _ in self.header) + "|")
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)


def share(scores: Sequence[Score], what: Callable[[Score], bool]) -> str:
    """`k/n = p% [lo%, hi%]` with the Wilson interval; `not run` where no check stage ran (no GPU)."""
    n, k = len(scores), sum(1 for s in scores if what(s))
    if n == 0:
        return "–"
    if not any(s.checked for s in scores):
        return "not run"
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {k / n:.0%} [{lo:.0%}, {hi:.0%}]"


def _speedups(scores: Sequence[Score]) -> list[float]:
    return [s.speedup for s in scores if s.speedup is not None]


def best_speedup(scores: Sequence[Score]) -> str:
    values = _speedups(scores)
    return f"{max(values):.2f}x" if values else "–"


def speedup_summary(scores: Sequence[Score]) -> tuple[str, str]:
    """(best speedup, geometric mean [bootstrap 95 % interval]) over the scores that have one."""
    values = _speedups(scores)
    if not values:
        return ("–", "–")
    lo, hi = bootstrap_geomean(values)
    return (best_speedup(scores), f"{geomean(values):.2f}x [{lo:.2f}, {hi:.2f}]")


def cells(scores: Sequence[TrajectoryScore]) -> dict[Cell, list[TrajectoryScore]]:
    grouped: dict[Cell, list[TrajectoryScore]] = {}
    for s in scores:
        grouped.setdefault(s.cell, []).append(s)
    return grouped


def results_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    for cell, group in cells(scores).items():
        finals = [s.final for s in group]
        best, mean = speedup_summary(finals)
        rows.append([*cell, str(len(group)), share(finals, _correct), share(finals, _verified), best, mean])
    header = [
        "model",
        "target",
        "task",
        "trajectories",
        "correct",
        "correct and verified",
        "best speedup",
        "speedup (geomean [95% CI])",
    ]
    note = "Each trajectory's handed-over kernel on every shape the run evaluated. Shares with Wilson 95% intervals; speedups over correct kernels timed on every shape, bootstrap interval (seed 0)."
    return Table("Results", header, rows, note)


def budget_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    for cell, group in cells(scores).items():
        for k in sorted({k for s in group for k in s.budgets}):
            budgets = [s.budgets[k] for s in group if k in s.budgets]
            visible = [b.visible for b in budgets]
            hidden = [b.hidden for b in budgets if b.hidden is not None]
            rows.append(
                [
                    *cell,
                    str(k),
                    share(visible, _correct),
                    share(visible, _verified),
                    best_speedup(visible),
                    share(hidden, _correct),
                    share(hidden, _verified),
                    best_speedup(hidden),
                ]
            )
    header = [
        "model",
        "target",
        "task",
        "turns",
        "visible: correct",
        "visible: verified",
        "visible: best speedup",
        "hidden: correct",
        "hidden: verified",
        "hidden: best speedup",
    ]
    note = "The best kernel within the first k model calls of each trajectory. Hidden-shape scores exist for the trajectories whose best kernel within k turns is the kernel the run scored on the hidden shapes."
    return Table("By turn budget", header, rows, note)


def shape_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    for cell, group in cells(scores).items():
        for shape in sorted({sh for s in group for sh in s.shapes}):
            entries = [s.shapes[shape] for s in group if shape in s.shapes]
            judged = [score for _, score in entries]
            best, mean = speedup_summary(judged)
            rows.append([*cell, shape, "yes" if entries[0][0] else "no", share(judged, _correct), best, mean])
    header = ["model", "target", "task", "shape", "hidden", "correct", "best speedup", "speedup (geomean [95% CI])"]
    return Table("Per shape", header, rows)


def pass_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    for cell, group in cells(scores).items():
        n, c = len(group), sum(1 for s in group if s.final.verified)
        passes = [f"{pass_at_k(n, c, k):.3f}" if k <= n else "–" for k in PASS_K]
        speedups = [s.final.speedup if s.final.correct else None for s in group]
        rows.append([*cell, str(n), str(c), *passes, *(f"{fast_p(speedups, p):.3f}" for p in FAST_P)])
    header = ["model", "target", "task", "n", "c", *(f"pass@{k}" for k in PASS_K), *(f"fast_{p:g}" for p in FAST_P)]
    note = "pass@k: unbiased estimator over n trajectories of which c handed over a correct and verified kernel. fast_p: share of trajectories whose kernel is correct with speedup > p (a kernel not timed counts as not fast)."
    return Table("pass@k and fast_p", header, rows, note)


def failure_table(scores: Sequence[TrajectoryScore]) -> Table:
    counts: dict[tuple[str, int], dict[str, int]] = {}
    for s in scores:
        for number, category in enumerate(s.turns, start=1):
            row = counts.setdefault((s.model, number), dict.fromkeys(TURN_CATEGORIES, 0))
            row[category] += 1
    rows = [
        [model, str(turn), str(sum(c.values())), *map(str, c.values())] for (model, turn), c in sorted(counts.items())
    ]
    note = "Per turn, the first stage that failed (none failed: the stages that ran passed, others could not run here)."
    return Table("Failure stage per turn", ["model", "turn", "kernels asked", *TURN_CATEGORIES], rows, note)


def usage_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    for model in sorted({s.model for s in scores}):
        group = [s for s in scores if s.model == model and s.turns]
        if not group:
            continue
        costs = [s.cost for s in group]
        priced = [c for c in costs if c is not None]
        total = f"{sum(priced):.4f}" + (f" ({len(costs) - len(priced)} unpriced)" if len(priced) < len(costs) else "")
        rows.append(
            [
                model,
                str(len(group)),
                str(sum(s.calls for s in group)),
                str(sum(s.input_tokens for s in group)),
                str(sum(s.output_tokens for s in group)),
                total if priced else "–",
                f"{sum(priced) / len(priced):.4f}" if priced else "–",
            ]
        )
    header = [
        "model",
        "trajectories",
        "model calls",
        "input tokens",
        "output tokens",
        "cost (USD)",
        "cost per trajectory (USD)",
    ]
    return Table("Tokens and cost", header, rows)


def tables(scores: Sequence[TrajectoryScore]) -> list[Table]:
    return [
        results_table(scores),
        budget_table(scores),
        shape_table(scores),
        pass_table(scores),
        failure_table(scores),
        usage_table(scores),
    ]


def markdown(title: str, preamble: Sequence[str], report: Sequence[Table]) -> str:
    parts = [f"# {title}", "", *preamble, "", *(t.markdown() + "\n" for t in report)]
    return "\n".join(parts)


def _correct(s: Score) -> bool:
    return s.correct


def _verified(s: Score) -> bool:
    return s.verified
