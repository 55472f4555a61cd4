"""The paper-style tables of `ptxbench report`, built from trajectory scores, and their Markdown.

Each cell is a (model, target, task, language); its trajectories are the samples of every estimate: shares
with Wilson 95 % intervals, speedups and speed of light as geometric means with a seeded bootstrap interval, the
unbiased pass@k (a trajectory passes when its kernel is correct and verified) and fast_p (correct and
speedup > p). A trajectory whose kernel was not judged for a figure (a stage it needs could not run here)
is no sample of it, and a figure no kernel was judged for reads `not judged`. The tables name the language
(a `lang` column) as soon as one kernel is not CUDA, and a report of several languages puts them side by
side."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..languages import CUDA, LANGUAGES
from ..task.cases import natural
from .scores import TURN_CATEGORIES, Score, TrajectoryScore
from .stats import FAST_P, bootstrap_geomean, fast_p, geomean, pass_at_k, wilson

PASS_K = (1, 5, 10)
NOT_JUDGED = "not judged"  # a stage the figure needs could not run here (no GPU, a tool unavailable)
CELL = ("model", "target", "task")  # the columns (attributes of TrajectoryScore) most tables group by
SPEED_HEADER = [
    "best speedup",
    "best speed of light",
    "speedup (geomean [95% CI])",
    "speed of light (geomean [95% CI])",
]
SIDE_HEADER = ("trajectories", "correct and verified", SPEED_HEADER[2])  # per language, side by side
SPEED_OF_LIGHT_NOTE = (
    "Speed of light: the share of the roofline the kernel reached (the time of the task's FLOPs and bytes at "
    "the GPU's datasheet peaks over the measured time), per kernel the geometric mean over its shapes."
)


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


def share(scores: Sequence[Score], what: Callable[[Score], bool | None]) -> str:
    """`k/n = p% [lo%, hi%]` with the Wilson interval over the kernels judged, and how many were not;
    `not judged` when none was (no GPU)."""
    if not scores:
        return "–"
    k, n = tally(scores, what)
    if n == 0:
        return NOT_JUDGED
    lo, hi = wilson(k, n)
    unjudged = f"; {len(scores) - n} {NOT_JUDGED}" if n < len(scores) else ""
    return f"{k}/{n} = {k / n:.0%} [{lo:.0%}, {hi:.0%}]{unjudged}"


def tally(scores: Sequence[Score], what: Callable[[Score], bool | None]) -> tuple[int, int]:
    """(kernels for which `what` holds, kernels judged for it)."""
    judged = [j for j in map(what, scores) if j is not None]
    return sum(judged), len(judged)


@dataclass(frozen=True)
class Figure:
    """A number of a timed kernel, shown as the best and the geometric mean over kernels."""

    of: Callable[[Score], float | None]
    form: str
    bound_form: str  # the bootstrap interval's bounds


SPEEDUP = Figure(lambda s: s.speedup, "{:.2f}x", "{:.2f}")
SPEED_OF_LIGHT = Figure(lambda s: s.speed_of_light, "{:.1%}", "{:.1%}")


def _values(scores: Sequence[Score], figure: Figure) -> list[float]:
    return [v for v in map(figure.of, scores) if v is not None]


def _absent(scores: Sequence[Score]) -> str:
    """What a figure no kernel has reads as: not judged when some kernel's time could not run here."""
    return NOT_JUDGED if any(s.timed is None for s in scores) else "–"


def best(scores: Sequence[Score], figure: Figure) -> str:
    values = _values(scores, figure)
    return figure.form.format(max(values)) if values else _absent(scores)


def mean(scores: Sequence[Score], figure: Figure) -> str:
    """The geometric mean [bootstrap 95 % interval] over the scores that have the figure."""
    values = _values(scores, figure)
    if not values:
        return _absent(scores)
    lo, hi = bootstrap_geomean(values)
    bounds = f"{figure.bound_form.format(lo)}, {figure.bound_form.format(hi)}"
    return f"{figure.form.format(geomean(values))} [{bounds}]"


def languages(scores: Sequence[TrajectoryScore]) -> list[str]:
    """The languages of the scores' kernels, in the order of `languages.LANGUAGES`."""
    present = {s.lang for s in scores}
    return [name for name in LANGUAGES if name in present]


def columns(scores: Sequence[TrajectoryScore], names: Sequence[str] = CELL) -> list[str]:
    """The columns a table groups the trajectories by: `names`, then `lang` as soon as one kernel is not
    CUDA (a CUDA-only report reads as before there were languages)."""
    return [*names, "lang"] if any(s.lang != CUDA.name for s in scores) else list(names)


def key(score: TrajectoryScore, names: Sequence[str]) -> tuple[str, ...]:
    """The trajectory's values in the columns `names`."""
    return tuple(str(getattr(score, name)) for name in names)


def cells(scores: Sequence[TrajectoryScore], names: Sequence[str]) -> dict[tuple[str, ...], list[TrajectoryScore]]:
    """The trajectories grouped by the columns `names`, in the order of `scores`."""
    grouped: dict[tuple[str, ...], list[TrajectoryScore]] = {}
    for s in scores:
        grouped.setdefault(key(s, names), []).append(s)
    return grouped


def results_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    names = columns(scores)
    for cell, group in cells(scores, names).items():
        finals = [s.final for s in group]
        rows.append([*cell, str(len(group)), share(finals, correct), share(finals, verified), *_speed(finals)])
    header = [*names, "trajectories", "correct", "correct and verified", *SPEED_HEADER]
    note = (
        "Each trajectory's handed-over kernel on every shape the run evaluated. Shares with Wilson 95% intervals "
        f"over the kernels judged ({NOT_JUDGED}: a stage the figure needs could not run here, e.g. without a GPU); "
        f"speedups over correct kernels timed on every shape, bootstrap interval (seed 0). {SPEED_OF_LIGHT_NOTE}"
    )
    return Table("Results", header, rows, note)


def language_table(scores: Sequence[TrajectoryScore]) -> Table:
    """Per model, target and task, each language's handed-over kernels next to the others'."""
    names = languages(scores)
    rows = []
    for cell, group in cells(scores, CELL).items():
        by_lang = {lang: [s.final for s in group if s.lang == lang] for lang in names}
        rows.append([*cell, *(f for finals in by_lang.values() for f in _side(finals))])
    header = [*CELL, *(f"{lang}: {what}" for lang in names for what in SIDE_HEADER)]
    note = (
        "Each language's handed-over kernels, figured as in Results: the share correct and verified (Wilson 95% "
        "interval) and the geometric-mean speedup over correct kernels timed on every shape (bootstrap interval)."
    )
    return Table("Languages side by side", header, rows, note)


def _side(finals: Sequence[Score]) -> list[str]:
    return [str(len(finals)), share(finals, verified), mean(finals, SPEEDUP)]


def _speed(scores: Sequence[Score]) -> list[str]:
    """Best speedup and speed of light, then their geometric means with bootstrap intervals."""
    return [best(scores, SPEEDUP), best(scores, SPEED_OF_LIGHT), mean(scores, SPEEDUP), mean(scores, SPEED_OF_LIGHT)]


def budget_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    names = columns(scores)
    for cell, group in cells(scores, names).items():
        for k in sorted({k for s in group for k in s.budgets}):
            budgets = [s.budgets[k] for s in group if k in s.budgets]
            visible = [b.visible for b in budgets]
            hidden = [b.hidden for b in budgets if b.hidden is not None]
            rows.append([*cell, str(k), *_budget(visible), *_budget(hidden)])
    header = [*names, "turns"]
    for shapes in ("visible", "hidden"):
        header += [f"{shapes}: {name}" for name in ("correct", "verified", "best speedup", "best speed of light")]
    note = "The best kernel within the first k model calls of each trajectory. Hidden-shape scores exist for the trajectories whose best kernel within k turns is the kernel the run scored on the hidden shapes."
    return Table("By turn budget", header, rows, note)


def _budget(scores: Sequence[Score]) -> list[str]:
    return [share(scores, correct), share(scores, verified), best(scores, SPEEDUP), best(scores, SPEED_OF_LIGHT)]


def shape_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    names = columns(scores)
    for cell, group in cells(scores, names).items():
        for shape in sorted({sh for s in group for sh in s.shapes}, key=natural):
            entries = [s.shapes[shape] for s in group if shape in s.shapes]
            on_shape = [score for _, score in entries]
            rows.append([*cell, shape, "yes" if entries[0][0] else "no", share(on_shape, correct), *_speed(on_shape)])
    header = [*names, "shape", "hidden", "correct", *SPEED_HEADER]
    return Table("Per shape", header, rows, SPEED_OF_LIGHT_NOTE)


def pass_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    names = columns(scores)
    for cell, group in cells(scores, names).items():
        finals = [s.final for s in group]
        n, (c, judged) = len(finals), tally(finals, verified)
        passes = [f"{pass_at_k(n, c, k):.3f}" if k <= n else "–" for k in PASS_K]
        speedups = [s.speedup if s.timed else None for s in finals]
        fast = [f"{fast_p(speedups, p):.3f}" for p in FAST_P]
        every_speed = all(s.timed is not None for s in finals)
        rows.append(
            [*cell, str(n), str(c), str(n - judged), *_judged(passes, judged == n), *_judged(fast, every_speed)]
        )
    header = [*names, "n", "c", NOT_JUDGED, *(f"pass@{k}" for k in PASS_K)]
    header += [f"fast_{p:g}" for p in FAST_P]
    note = (
        "pass@k: unbiased estimator over n trajectories of which c handed over a correct and verified kernel. "
        "fast_p: share of trajectories whose kernel is correct with speedup > p (a kernel whose time failed "
        f"counts as not fast). Both need every trajectory's kernel judged (left out, the kernels that could not "
        f"be judged here would bias them); otherwise {NOT_JUDGED}, and the column {NOT_JUDGED} counts the "
        "trajectories whose kernel's verification could not run here."
    )
    return Table("pass@k and fast_p", header, rows, note)


def _judged(estimates: list[str], judged: bool) -> list[str]:
    return estimates if judged else [NOT_JUDGED] * len(estimates)


def failure_table(scores: Sequence[TrajectoryScore]) -> Table:
    names = columns(scores, ("model",))
    counts: dict[tuple[tuple[str, ...], int], dict[str, int]] = {}
    for s in scores:
        for number, category in enumerate(s.turns, start=1):
            row = counts.setdefault((key(s, names), number), dict.fromkeys(TURN_CATEGORIES, 0))
            row[category] += 1
    rows = [
        [*cell, str(turn), str(sum(c.values())), *map(str, c.values())] for (cell, turn), c in sorted(counts.items())
    ]
    note = "Per turn, the first stage that failed (none failed: the stages that ran passed, others could not run here)."
    return Table("Failure stage per turn", [*names, "turn", "kernels asked", *TURN_CATEGORIES], rows, note)


def usage_table(scores: Sequence[TrajectoryScore]) -> Table:
    rows = []
    names = columns(scores, ("model",))
    for cell, everyone in sorted(cells(scores, names).items()):
        group = [s for s in everyone if s.turns]
        if not group:
            continue
        costs = [s.cost for s in group]
        priced = [c for c in costs if c is not None]
        total = f"{sum(priced):.4f}" + (f" ({len(costs) - len(priced)} unpriced)" if len(priced) < len(costs) else "")
        rows.append(
            [
                *cell,
                str(len(group)),
                str(sum(s.calls for s in group)),
                str(sum(s.input_tokens for s in group)),
                str(sum(s.output_tokens for s in group)),
                total if priced else "–",
                f"{sum(priced) / len(priced):.4f}" if priced else "–",
            ]
        )
    header = [
        *names,
        "trajectories",
        "model calls",
        "input tokens",
        "output tokens",
        "cost (USD)",
        "cost per trajectory (USD)",
    ]
    return Table("Tokens and cost", header, rows)


def tables(scores: Sequence[TrajectoryScore]) -> list[Table]:
    """The report's tables; the languages side by side when it holds several."""
    return [
        results_table(scores),
        *([language_table(scores)] if len(languages(scores)) > 1 else []),
        budget_table(scores),
        shape_table(scores),
        pass_table(scores),
        failure_table(scores),
        usage_table(scores),
    ]


def markdown(title: str, preamble: Sequence[str], report: Sequence[Table]) -> str:
    parts = [f"# {title}", "", *preamble, "", *(t.markdown() + "\n" for t in report)]
    return "\n".join(parts)


def correct(s: Score) -> bool | None:
    return s.correct


def verified(s: Score) -> bool | None:
    return s.verified
