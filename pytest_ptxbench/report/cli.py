"""The `ptxbench` command: `report`, `compare`, `fixit` and `export` over run directories."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..agent.models import MissingKey
from ..rundir import enclosing_run, write_atomic
from ..settings import defaults
from ..verdict import STAGES
from . import fixit, flashinfer_trace, html
from .compare import compare
from .runs import Run, RunError, load_run
from .scores import score_runs
from .tables import markdown, tables


def load_runs(paths: Sequence[Path], allow_mixed: bool) -> list[Run]:
    """The run directories, refusing to merge different task sets unless `allow_mixed`."""
    runs = [load_run(path) for path in dict.fromkeys(paths)]
    sets: dict[str, Path] = {}
    for run in runs:
        sets.setdefault(run.task_set, run.path)
    if len(sets) > 1 and not allow_mixed:
        named = ", ".join(f"{digest} ({path})" for digest, path in sets.items())
        raise RunError(f"the runs use different task sets: {named}; pass --allow-mixed-task-sets to merge them anyway")
    return runs


def refuse_run_directory(out: Path) -> None:
    """RunError when `out` is or lies in a run directory: no command writes into one (a run's files are its
    only record)."""
    run = enclosing_run(out)
    if run is not None:
        raise RunError(f"--out={out} is inside the run directory {run}; no command writes into a run directory")


def run_report(paths: Sequence[Path], out: Path, allow_mixed: bool, plots: bool) -> list[Path]:
    """Write `report.md` and `report.html` to `out`; returns their paths."""
    refuse_run_directory(out)
    runs = load_runs(paths, allow_mixed)
    scores = score_runs(runs)
    built = tables(scores)
    preamble = [
        f"{run.path}: model {run.model}, task set {run.task_set}, harness {run.environment.get('harness_version')}, "
        f"devices {', '.join(d.get('name', '?') for d in run.environment.get('devices', [])) or 'none'}"
        + (f"; CUT SHORT: {run.cut_short}" if run.cut_short else "")
        for run in runs
    ]
    title = "ptxbench report"
    images = html.plots(scores) if plots else []
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.md", out / "report.html"]
    write_atomic(written[0], markdown(title, preamble, built))
    write_atomic(written[1], html.render(title, preamble, built, images))
    return written


def run_fixit(args: argparse.Namespace) -> str:
    """Write the examples; returns a summary for the terminal."""
    refuse_run_directory(args.out)
    runs = load_runs(args.runs, allow_mixed=True)
    rows = fixit.self_repairs(runs, args.verification)
    lines = [f"self-repairs: {len(rows)}"]
    if args.teacher:
        from ..agent.models.specs import check_sdk, connect, parse_spec
        from .fixit_teacher import teach

        settings = defaults()
        settings.update(model=args.teacher, base_url=args.base_url)
        spec = parse_spec(args.teacher, settings)
        if spec is None:
            raise ValueError(f"--teacher={args.teacher}: not a model (an alias or provider:model)")
        check_sdk(spec)
        failures = [
            f
            for f in fixit.failed_turns(runs)
            if (not args.stage or f.stage in args.stage) and (not args.target or f.ptxbench["target"] in args.target)
        ]
        taught = teach(failures, connect(spec, settings), args.teacher, args.tasks, settings, args.verification)
        rows += taught.rows
        lines.append(f"teacher repairs kept: {len(taught.rows)}, dropped: {len(taught.dropped)}")
        lines += [f"  dropped {why}" for why in taught.dropped]
    chosen = fixit.select(rows, args.stage, args.target, args.min_speedup, args.balance)
    fixit.write(chosen, args.out)
    lines.append(f"wrote {len(chosen)} example(s) to {args.out}")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="ptxbench", description="Reports, comparisons, repair data and exports from ptxbench runs."
    )
    commands = top.add_subparsers(dest="command", required=True)

    rep = commands.add_parser("report", help="Markdown and HTML tables (and plots) from run directories")
    rep.add_argument("runs", nargs="+", type=Path, metavar="RUN")
    rep.add_argument("--out", type=Path, default=Path("report"), help="folder for report.md and report.html")
    rep.add_argument("--allow-mixed-task-sets", action="store_true", help="merge runs of different task sets")
    rep.add_argument("--no-plots", dest="plots", action="store_false", help="HTML without plots (no matplotlib)")

    cmp = commands.add_parser("compare", help="what changed per test from run A to run B")
    cmp.add_argument("a", type=Path, metavar="A")
    cmp.add_argument("b", type=Path, metavar="B")
    cmp.add_argument("--all", dest="everything", action="store_true", help="list unchanged tests too")

    fix = commands.add_parser("fixit", help="supervised repair examples (Parquet or JSON lines)")
    fix.add_argument("runs", nargs="+", type=Path, metavar="RUN")
    fix.add_argument("--out", type=Path, required=True, help="FILE.parquet, else JSON lines")
    fix.add_argument(
        "--teacher", metavar="MODEL", help="also ask this model (alias or provider:model) to repair each failed turn"
    )
    fix.add_argument("--base-url", help="the teacher API's base URL")
    fix.add_argument(
        "--tasks", type=Path, default=Path("tasks"), help="the task catalogue the runs used (default: tasks)"
    )
    fix.add_argument(
        "--verification",
        choices=list(fixit.LEVELS),
        default="static",
        help="least verification of a repair: static (build, inspect; no stage failed) or full (every stage passed)",
    )
    fix.add_argument(
        "--stage",
        action="append",
        default=[],
        choices=["no kernel", *STAGES],
        help="failure stages to keep (repeatable)",
    )
    fix.add_argument("--target", action="append", default=[], help="targets to keep (repeatable)")
    fix.add_argument("--min-speedup", type=float, help="least speedup of the repaired kernel")
    fix.add_argument("--balance", action="store_true", help="as many examples per task as the task with the fewest")

    exp = commands.add_parser("export", help="a run directory in another format (FlashInfer-Trace)")
    exp.add_argument("run", type=Path, metavar="RUN")
    exp.add_argument("--format", required=True, choices=flashinfer_trace.FORMATS, help="the format to write")
    exp.add_argument("--out", type=Path, required=True, help="a new (or empty) folder for the tree")
    exp.add_argument(
        "--tasks", type=Path, default=Path("tasks"), help="the task catalogue the run used (default: tasks)"
    )
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "report":
            for path in run_report(args.runs, args.out, args.allow_mixed_task_sets, args.plots):
                print(path)
        elif args.command == "compare":
            table = compare(load_run(args.a), load_run(args.b), args.everything)
            print(table.markdown())
        elif args.command == "export":
            refuse_run_directory(args.out)
            print(flashinfer_trace.export_run(args.run, args.tasks, args.out).summary(args.out))
        else:
            print(run_fixit(args))
    except (RunError, ValueError, MissingKey, html.MissingMatplotlib) as exc:
        print(f"ptxbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
