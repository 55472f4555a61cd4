#!/usr/bin/env python3
"""The H100 reference GEMM's plans as timed on a GPU, and where a variant's plans stand against them, on the CPU.

scripts/gemm_plan_times.csv holds, for each bench call (`scripts/bench_reference.py gemm`), each shape's median time
by events under each kernel file, named by the plan scripts/gemm_plans.py prints for that file at that shape, and
cuBLAS's time in the same call (plan `cuBLAS`). Times compare within one call only. A plan names launches, not code:
rows timed before a change to the kernels themselves describe other code, and go when such a change lands.

Usage:
  python3 scripts/gemm_plan_times.py compare [--kernel FILE] [--base FILE]
      the shapes where FILE (a variant of the reference) takes another plan than BASE (default: the reference), with
      both plans' times in each call that timed both; the shapes where a call timed a plan 3% or more faster than
      FILE's; last, the bench's -k arguments for the moves no call timed.
  python3 scripts/gemm_plan_times.py record LOG --call TEXT --gpu TEXT --kernel FILE [--kernel FILE ...]
      adds LOG's times to the file, each kernel column's plans from its FILE, in the log's order (the files as they
      were in the call: the log names paths of the call's tree); TEXT: the call, as its MEASUREMENTS.md entry names
      it, and the GPU.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemm_plans  # the printer, next to this script

TIMES = Path(__file__).resolve().with_suffix(".csv")
FIELDS = ("call", "gpu", "shape", "plan", "ms")
VENDOR = "cuBLAS"
EVEN = 0.03  # a plan this much faster or slower than another, in one call, counts as faster or slower

# A bench log's result line: `gemm-n{N}-k{K} m{M}`, then `T ms S x` per kernel, cuBLAS's `T ms`, then `F TFLOP/s`.
RESULT = re.compile(r"^gemm-(n\d+-k\d+ m\d+)\s+(.*?)\s+\S+ TFLOP/s")
TIME = re.compile(r"(nan|\d+\.\d+) ms")
KERNEL = re.compile(r"^kernel (\d+): (.+)$")


@dataclass(frozen=True)
class Time:
    call: str
    gpu: str
    shape: str  # n{N}-k{K} m{M}, as the printer labels it
    plan: str  # the printer's words, or cuBLAS
    ms: float


def read_times(path: Path = TIMES) -> list[Time]:
    """The file's rows. Raises ValueError naming the file, line and field of a row that does not read."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise ValueError(f"{path}: header {reader.fieldnames}, expected {list(FIELDS)}")
        rows = []
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if any(not row[f] for f in FIELDS):
                raise ValueError(f"{where}: empty {next(f for f in FIELDS if not row[f])!r}")
            if not re.fullmatch(r"n\d+-k\d+ m\d+", row["shape"]):
                raise ValueError(f"{where}: shape {row['shape']!r}, expected n{{N}}-k{{K}} m{{M}}")
            try:
                ms = float(row["ms"])
            except ValueError:
                raise ValueError(f"{where}: ms {row['ms']!r} is not a number") from None
            if not ms > 0 or math.isinf(ms):
                raise ValueError(f"{where}: ms {row['ms']!r} is not a time")
            rows.append(Time(row["call"], row["gpu"], row["shape"], row["plan"], ms))
    return rows


@dataclass(frozen=True)
class Bench:
    """One `scripts/bench_reference.py gemm` log: each shape's times per kernel (NaN where its check failed), and
    cuBLAS's."""

    kernels: list[str]  # the files, as the log names them
    shapes: dict[str, tuple[list[float], float]]


def read_bench(log: Path) -> Bench:
    """Raises ValueError naming the log where it holds no result, or results of another count of kernels."""
    kernels: dict[int, str] = {}
    shapes: dict[str, tuple[list[float], float]] = {}
    for line in log.read_text().splitlines():
        if named := KERNEL.match(line):
            kernels[int(named[1])] = named[2].strip()
        elif result := RESULT.match(line):
            found = [float(t) for t in TIME.findall(result[2])]
            if len(found) < 2:
                raise ValueError(f"{log}: {line.split()[0]} {line.split()[1]}: no kernel time and cuBLAS time")
            shapes[result[1]] = (found[:-1], found[-1])
    if not shapes:
        raise ValueError(f"{log}: no GEMM result line (is it the output of scripts/bench_reference.py gemm?)")
    counts = {len(times) for times, _ in shapes.values()}
    if counts != {len(kernels)}:
        raise ValueError(f"{log}: {len(kernels)} kernels named, results with {sorted(counts)} kernel times")
    return Bench([kernels[k] for k in sorted(kernels)], shapes)


def plans_of(kernel: Path, shapes: list[str]) -> dict[str, str]:
    """The printer's plan for `kernel` at each of `shapes` (`n{N}-k{K} m{M}`)."""
    triples = [tuple(int(v) for v in re.findall(r"\d+", s)) for s in shapes]
    return gemm_plans.plans_of(kernel, [(n, k, m) for n, k, m in triples])


def record(bench: Bench, call: str, gpu: str, plans: list[dict[str, str]], path: Path = TIMES) -> list[Time]:
    """Appends `bench`'s times to `path` as `call` on `gpu`, with each kernel's `plans` (by shape); returns the new
    rows. Raises ValueError where the call is in the file already."""
    if path.exists() and any(t.call == call for t in read_times(path)):
        raise ValueError(f"{path}: call {call!r} is recorded already")
    rows = []
    for shape, (times, vendor) in bench.shapes.items():
        rows += [Time(call, gpu, shape, p[shape], ms) for p, ms in zip(plans, times, strict=True) if not math.isnan(ms)]
        if not math.isnan(vendor):
            rows.append(Time(call, gpu, shape, VENDOR, vendor))
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        if new:
            writer.writerow(FIELDS)
        writer.writerows((t.call, t.gpu, t.shape, t.plan, f"{t.ms:.3f}") for t in rows)
    return rows


def by_call(times: list[Time]) -> dict[str, dict[tuple[str, str], dict[str, float]]]:
    """Per shape, then per call (`call, gpu`), each plan's mean time."""
    kept: dict[str, dict[tuple[str, str], dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for t in times:
        kept[t.shape][(t.call, t.gpu)][t.plan].append(t.ms)
    return {
        shape: {call: {plan: statistics.mean(ms) for plan, ms in plans.items()} for call, plans in calls.items()}
        for shape, calls in kept.items()
    }


def compare(times: list[Time], mine: dict[str, str], base: dict[str, str]) -> list[str]:
    """The report `compare` prints: `mine` and `base` are two kernels' plans at every shape."""
    timed = by_call(times)

    def calls(shape: str) -> dict[tuple[str, str], dict[str, float]]:
        return timed.get(shape, {})

    moves = [s for s in mine if mine[s] != base[s]]
    lines = [f"== {len(moves)} of {len(mine)} shapes take another plan than the base's"]
    untimed = []
    for shape in moves:
        lines.append(f"{shape}: {base[shape]} -> {mine[shape]}")
        both = {c: p for c, p in calls(shape).items() if mine[shape] in p and base[shape] in p}
        for (call, gpu), p in both.items():
            was, now = p[base[shape]], p[mine[shape]]
            vendor = f", {VENDOR} {p[VENDOR]:.3f}" if VENDOR in p else ""
            lines.append(
                f"    {call}, {gpu}: {was:.3f} -> {now:.3f} ms ({now / was:.2f}x, {_verdict(now, was)}){vendor}"
            )
        if not both:
            lines.append("    no call timed both plans")
            untimed.append(shape)
    lines.append(f"== shapes where a call timed a plan {EVEN:.0%} or more faster than this kernel's")
    for shape, plan in mine.items():
        for (call, gpu), p in calls(shape).items():
            if plan not in p:
                continue
            best = min((q for q in p if q != VENDOR), key=p.__getitem__)
            if p[best] < (1 - EVEN) * p[plan]:
                lines.append(f"{shape}: {plan} {p[plan]:.3f} ms, but {best} {p[best]:.3f} ms ({call}, {gpu})")
    if untimed:
        lines.append(f"== the bench's -k arguments for the moves no call timed ({len(untimed)})")
        lines.append(" ".join(f'-k "{s} "' for s in untimed))
    return lines


def _verdict(now: float, was: float) -> str:
    return "faster" if now < (1 - EVEN) * was else "slower" if now > (1 + EVEN) * was else "even"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--times", type=Path, default=TIMES, help="the times file (default: %(default)s)")
    commands = parser.add_subparsers(dest="command", required=True)
    compared = commands.add_parser("compare", help="a variant's plans against the base's and the times")
    compared.add_argument("--kernel", type=Path, default=gemm_plans.KERNEL, help="the variant (default: the reference)")
    compared.add_argument("--base", type=Path, default=gemm_plans.KERNEL, help="the base (default: the reference)")
    recorded = commands.add_parser("record", help="add a bench log's times")
    recorded.add_argument("log", type=Path)
    recorded.add_argument("--call", required=True, help="e.g. '2026-12-08 session 43 call 1'")
    recorded.add_argument("--gpu", required=True, help="e.g. 'H200'")
    recorded.add_argument(
        "--kernel", dest="kernels", action="append", type=Path, required=True, help="each column's file, in order"
    )
    args = parser.parse_args()
    files = [args.log] if args.command == "record" else [args.kernel, args.base, args.times]
    for file in [*files, *getattr(args, "kernels", [])]:
        if not file.is_file():
            parser.error(f"{file}: no such file")
    try:
        if args.command == "record":
            bench = read_bench(args.log)
            if len(args.kernels) != len(bench.kernels):
                parser.error(f"{args.log} times {len(bench.kernels)} kernels, {len(args.kernels)} given with --kernel")
            plans = [plans_of(k, list(bench.shapes)) for k in args.kernels]
            rows = record(bench, args.call, args.gpu, plans, args.times)
            print(f"{args.times}: {len(rows)} times of {args.call!r} added")
            return 0
        shapes = [f"n{n}-k{k} m{m}" for n, k, m in gemm_plans.task_shapes()]
        mine = plans_of(args.kernel, shapes)
        base = mine if args.base.resolve() == args.kernel.resolve() else plans_of(args.base, shapes)
        report = compare(read_times(args.times), mine, base)
    except (ValueError, RuntimeError) as error:
        print(error, file=sys.stderr)
        return 1
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
