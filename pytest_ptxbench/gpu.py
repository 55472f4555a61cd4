"""The GPU stages of one candidate on one shape: capture → check → profile → sanitize → time.

The pytest process only orchestrates. The candidate's host code runs in one place: the capture child
(sandboxed), which records the launcher's launches at two buffer placements as data. Everything measured
runs in harness code: the runner replays those launches from the cubins the harness extracted (check,
time, and under ncu and compute-sanitizer, sandboxed, for profile and sanitize); the trusted child (torch) makes
inputs, references and baseline times. Outputs are compared here, never in a child.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .candidate import Candidate
from .checkout import CheckoutGuard
from .child import wire
from .languages import LANGUAGES
from .replay.capturing import Captured, CaptureFailed, Own, buffer_sizes, capture
from .replay.client import Runner, RunnerFailed
from .replay.timer import interleave
from .stages import check, profile, sanitize, timing
from .targets import Target
from .task.catalogue import AxisValue, Family, Shape, Task, resolved_params
from .toolchain import find_library, find_tool
from .verdict import Status, Verdict
from .workers import PACKAGE_ROOT, Child, ChildFailed, Sandbox, child_command, child_environment, make_sandbox

# per input set, the comparisons of the check's first placement, by output
CheckedOutputs = dict[int, dict[str, check.Comparison]]
TRUSTED_TIMEOUT = 900.0  # input sets and fp32 references of a large shape
ATTEMPTS = 3  # captures at fresh addresses when the driver keeps one of them for itself


def flashinfer_base() -> Path:
    """Where FlashInfer keeps the kernels it compiles at first use (~90 s each), across runs: under
    FLASHINFER_WORKSPACE_BASE, by default the home folder (never the trusted child's scratch HOME)."""
    return Path(os.environ.get("FLASHINFER_WORKSPACE_BASE", str(Path.home())))


@dataclass(frozen=True)
class Prepared:
    """Input sets and references of one (task, shape), as files the trusted child wrote."""

    key: str
    values: dict[str, AxisValue]
    params: list[dict[str, Any]]
    sets: list[dict[str, dict[str, str]]]
    labels: list[str]
    libraries: dict[str, Any]  # versions: torch, cuDNN, the device, and what the baseline requires
    unavailable: str | None  # why the baseline cannot run here, e.g. its library cannot be imported
    host: dict[str, list[int]]  # the host-visible inputs (page tables), the same in every set


class GpuStages:
    def __init__(self, settings: dict[str, Any], run_dir: Path) -> None:
        self.settings = settings
        self.run_dir = run_dir
        self._trusted: Child | None = None
        self._captures: dict[tuple[str, str], Captured] = {}  # per (candidate, task/shape)
        self._host: dict[str, dict[str, list[int]]] = {}  # host-visible inputs per task/shape
        self._coverage: dict[tuple[str, str, str], list[Verdict]] = {}  # profile and sanitize runs so far
        # kernels that changed the checkout: every later evaluation fails too, whatever it reuses from caches
        self._tampered: dict[str, Verdict] = {}
        shm = Path("/dev/shm")
        self.scratch = Path(tempfile.mkdtemp(prefix="ptxbench-", dir=shm if shm.is_dir() else None))
        # input sets, references and replayed outputs: written by harness processes, hidden from the capture child
        self.private = self.scratch / "private"
        self.references = self.private / "references"
        self.references.mkdir(parents=True)
        mode = settings["sandbox"]
        (run_dir / "logs").mkdir(parents=True, exist_ok=True)
        protected = [PACKAGE_ROOT, Path.cwd(), run_dir]
        self.sandbox, self.tool_sandbox = (
            (
                make_sandbox(protected, [self.scratch], hidden=[self.private]),
                # ncu and compute-sanitizer replaying: the inputs readable, only the scratch and logs writable
                make_sandbox(protected, [self.scratch, run_dir / "logs"]),
            )
            if mode != "off"
            else (Sandbox((), "none: --ptx-sandbox=off"),) * 2
        )
        if mode == "namespaces" and not self.sandbox.prefix:
            self.close()
            raise ValueError(f"--ptx-sandbox=namespaces cannot confine children here: {self.sandbox.description}")
        # the working directory and the package's own checkout, whole (of an installed package, its folder)
        package = PACKAGE_ROOT if (PACKAGE_ROOT / "pyproject.toml").is_file() else PACKAGE_ROOT / "pytest_ptxbench"
        self.guard = CheckoutGuard(Path.cwd().resolve(), (package.resolve(),), (run_dir.resolve(),))

    def close(self) -> None:
        if self._trusted is not None:
            self._trusted.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    # the trusted child -------------------------------------------------------------------------
    def _restart_trusted(self) -> None:
        """After an error torch's CUDA state is suspect: the next request gets a fresh child."""
        if self._trusted is not None:
            self._trusted.kill()
            self._trusted.close()
            self._trusted = None

    def trusted(self) -> Child:
        if self._trusted is None or not self._trusted.alive:
            folder = self.scratch / "trusted"
            extra = {
                "PTXBENCH_CUDART": str(find_library("libcudart.so.13") or ""),
                "FLASHINFER_WORKSPACE_BASE": str(flashinfer_base()),
            }
            self._trusted = Child("trusted", folder, child_environment(folder, extra))
        return self._trusted

    def prepare(self, family: Family, task: Task, shape_values: dict[str, AxisValue], label: str) -> Prepared:
        values = family.values(task, shape_values)
        key = f"{task.name}/{label}"
        params = resolved_params(family, values)
        if key not in self._host:
            self._host[key] = family.host_inputs.tables(values, self.settings["seed"]) if family.host_inputs else {}
        reply = self.trusted().request(
            {
                "op": "prepare",
                "key": key,
                "reference": family.reference,
                "derived": None if family.derived is None else asdict(family.derived),
                "baseline": family.baseline,
                "requires": list(family.timed_against.requires),
                "params": params,
                "values": values,
                "host": self._host[key],
                "seed": self.settings["seed"],
                "folder": str(self.private / "sets" / key),
                "references": str(self.references / key),
                "distributions": [{"name": d.name, **d.params} for d in family.distributions],
            },
            timeout=TRUSTED_TIMEOUT,
        )
        if not reply["ok"]:
            self._restart_trusted()
            raise ChildFailed(f"the trusted child could not prepare {key}: {reply['error']}")
        labels = [d.name for d in family.distributions]
        return Prepared(
            key, values, params, reply["sets"], labels, reply["libraries"], reply["unavailable"], self._host[key]
        )

    # one candidate on one shape ---------------------------------------------------------------
    def evaluate(
        self,
        candidate: Candidate,
        family: Family,
        task: Task,
        target: Target,
        shape: Shape,
        static: Sequence[Verdict],
        overrides: Mapping[str, Any] | None = None,
    ) -> list[Verdict]:
        """Every GPU stage's verdict; check fails, whatever else ran, when the checkout changed meanwhile."""
        if candidate.digest in self._tampered:
            return [self._tampered[candidate.digest]]
        settings = {**self.settings, **(overrides or {})}  # a test's own runs, warm-ups, call timeout
        subject = Subject(candidate, family, task, target, Code.of(static))
        try:
            prepared = self.prepare(family, task, dict(shape.values), shape.id)
        except ChildFailed as exc:
            return [Verdict("check", Status.TOOL_UNAVAILABLE, f"no reference: {exc}")]
        before = self.guard.snapshot()
        verdicts = self._stages(subject, shape, prepared, settings)
        judged = self.guard.judge(before, verdicts)
        if judged is not verdicts:
            self._tampered[candidate.digest] = judged[0]
        return judged

    def _stages(self, subject: Subject, shape: Shape, prepared: Prepared, settings: Mapping[str, Any]) -> list[Verdict]:
        started = time.monotonic()
        timeout = float(settings["call_timeout"])
        try:
            captured = self._capture(subject, prepared, timeout)
        except CaptureFailed as exc:
            return [Verdict("check", Status.FAILED, str(exc), {"stage": "capture"}, time.monotonic() - started)]
        captured_at = time.monotonic()
        folder = self.private / "candidates" / subject.candidate.digest / prepared.key
        try:
            runner = self.replayer(subject, prepared, folder, timeout)
        except (RunnerFailed, CaptureFailed) as exc:
            return [Verdict("check", Status.FAILED, str(exc), seconds=time.monotonic() - started)]
        captured = self._captures[(subject.candidate.digest, prepared.key)]  # captured again if relocated
        overhead = {"capture_seconds": captured_at - started, "runner_seconds": time.monotonic() - captured_at}
        # kernels launched to overlap the kernel before them (programmatic dependent launch), replayed so
        early = sorted({k.name for k in captured.lists[0].kernels if "programmatic" in k.attributes})
        try:
            checked, passed = self._check(runner, subject.family, prepared, started)
            checked.data.update(overhead, early_launches=early, launches=captured.lists[0].outline())
            verdicts = [checked]
            if checked.passed:
                names = frozenset(k.name for k in captured.lists[0].kernels)
                verdicts.append(self._covered("profile", subject, shape, names))
                verdicts.append(self._covered("sanitize", subject, shape, names))
                verdicts.append(self._time(runner, subject, shape, settings, passed))
        finally:
            runner.close()
        return verdicts

    def _capture(self, subject: Subject, prepared: Prepared, timeout: float) -> Captured:
        """The launch lists of one shape, captured once per candidate (profile and sanitize reuse them); where
        the driver keeps a drawn address for itself, captured again at others."""
        key = (subject.candidate.digest, prepared.key)
        if key not in self._captures:
            code, family = subject.code, subject.family
            language = LANGUAGES[subject.candidate.lang]
            request = {
                "cudart": str(find_library("libcudart.so.13")),
                "host": str(code.host),
                "entry": language.entry(family),
                "params": prepared.params,
                "inputs": [p["name"] for p in prepared.params if p["role"] == "input"],
                "host_inputs": prepared.host,
            }
            sizes = buffer_sizes(prepared.params, int(family.workspace_bytes(prepared.values)))
            folder = self.scratch / "captures" / subject.candidate.digest / prepared.key
            for attempt in range(ATTEMPTS):
                try:
                    self._captures[key] = capture(
                        language.capture_child, request, sizes, code.owned, folder, self.sandbox, timeout
                    )
                    break
                except CaptureFailed as exc:
                    if not exc.relocated or attempt == ATTEMPTS - 1:
                        raise
        return self._captures[key]

    def replayer(self, subject: Subject, prepared: Prepared, folder: Path, timeout: float | None = None) -> Runner:
        """A runner for one shape's launch lists; where the driver would not give the runner the captured
        addresses, the launches are captured again at others."""
        timeout = float(self.settings["call_timeout"]) if timeout is None else timeout
        for attempt in range(ATTEMPTS):
            captured = self._capture(subject, prepared, timeout)
            try:
                return Runner(folder, self._load(subject.code, prepared, captured), self._sets(prepared), timeout)
            except RunnerFailed as exc:
                if not exc.relocated or attempt == ATTEMPTS - 1:
                    raise
                del self._captures[(subject.candidate.digest, prepared.key)]
        raise AssertionError("unreachable")

    def _load(self, code: Code, prepared: Prepared, captured: Captured) -> dict[str, Any]:
        return {
            "cudart": str(find_library("libcudart.so.13")),
            "params": prepared.params,
            "cubins": [{"path": str(c.path), "sha256": c.sha256} for c in code.cubins],
            **captured.to_load(),
        }

    @staticmethod
    def _sets(prepared: Prepared) -> list[dict[str, str]]:
        return [s["inputs"] for s in prepared.sets]

    def _check(
        self, runner: Runner, family: Family, prepared: Prepared, started: float
    ) -> tuple[Verdict, CheckedOutputs]:
        """Every input set at the first placement, then the first set at the second under another poison; with
        the comparisons at the first placement, which the time stage's rechecks reuse."""
        first: CheckedOutputs = {}
        comparisons: list[check.Comparison] = []
        changed: list[str] = []
        overruns: list[str] = []
        runs = [(0, i, check.POISONS[0]) for i in range(len(prepared.sets))] + [(1, 0, check.POISONS[1])]
        try:
            for placement, index, poison in runs:
                checked = runner.check(placement, index, poison)
                changed += checked.inputs_changed
                overruns += checked.overruns
                label = f"{prepared.labels[index]}, placement {placement}, poison 0x{poison:02X}"
                found = compare_saved(family, prepared, index, checked.outputs, label, poison, first.get(index))
                if placement == 0:
                    first[index] = {c.output: c for c in found}
                comparisons += found
        except RunnerFailed as exc:
            return Verdict("check", Status.FAILED, str(exc), seconds=time.monotonic() - started), {}
        verdict = check.verdict(comparisons, family.matched_ratio, changed, overruns, time.monotonic() - started)
        verdict.data["sandbox"] = self.sandbox.description
        return verdict, first

    def _covered(self, stage: str, subject: Subject, shape: Shape, kernels: frozenset[str]) -> Verdict:
        """profile or sanitize, so that every kernel a judged shape launches ran under the tool at least once:
        sanitize at the task's sanitizer shape first, profile at the first shape judged, then each at any
        shape that launches a kernel not yet covered. A failure stays with the candidate."""
        key = (stage, subject.candidate.digest, subject.task.name)
        done = self._coverage.setdefault(key, [])
        if stage == "sanitize" and not done:
            done.append(self._once(stage, subject, dict(subject.family.sanitizer_shape), "sanitizer"))
        covered = frozenset().union(*(v.data.get("covered", ()) for v in done))
        if not kernels <= covered:
            done.append(self._once(stage, subject, dict(shape.values), shape.id))
        failed = [v for v in done if v.status is Status.FAILED]
        return failed[0] if failed else done[-1]

    def _once(self, stage: str, subject: Subject, values: dict[str, AxisValue], label: str) -> Verdict:
        """One replay of one shape by the runner under ncu (profile) or compute-sanitizer (sanitize)."""
        name = "ncu" if stage == "profile" else "compute-sanitizer"
        tool = find_tool(name)
        if tool is None:
            return Verdict(stage, Status.TOOL_UNAVAILABLE, f"requires {name}, found none")
        family, code, digest = subject.family, subject.code, subject.candidate.digest
        timeout = float(self.settings["call_timeout"])
        try:
            prepared = self.prepare(family, subject.task, values, label)
            captured = self._capture(subject, prepared, timeout)
        except ChildFailed as exc:
            return Verdict(stage, Status.TOOL_UNAVAILABLE, f"no inputs: {exc}")
        except CaptureFailed as exc:
            return Verdict(stage, Status.FAILED, f"at {label}: {exc}")
        folder = self.run_dir / "logs" / digest / subject.task.name / stage / label  # plan, result, tool logs
        folder.mkdir(parents=True, exist_ok=True)
        plan, result = folder / "plan.json", folder / "result.json"
        outputs = self.private / "once" / digest / stage
        requests = [
            {"op": "load", **self._load(code, prepared, captured)},
            {"op": "sets", "sets": self._sets(prepared)[:1]},
            {"op": "check", "placement": 0, "set": 0, "poison": check.POISONS[0], "outputs_dir": str(outputs)},
        ]
        plan.write_text(json.dumps({"result": str(result), "requests": requests}))
        runner = child_command("runner", "--once", str(plan))
        env = child_environment(folder)
        if stage == "profile":
            work = profile.Work(family.flops(prepared.values), family.min_tensor_share, family.max_simt_share)
            opcodes = family.opcodes.get(subject.target.name, ())
            prefix = self.tool_sandbox.prefix
            verdict = profile.profile(tool, runner, plan, result, env, code.own, opcodes, work, 600, prefix)
        else:
            verdict = sanitize.sanitize(tool, runner, plan, result, env, 600, self.tool_sandbox.prefix)
        verdict.data["shape"] = label
        verdict.data["sandbox"] = self.tool_sandbox.description
        verdict.data["covered"] = sorted({k.name for k in captured.lists[0].kernels})
        shutil.rmtree(outputs, ignore_errors=True)  # outputs nobody reads
        return verdict

    def _time(
        self, runner: Runner, subject: Subject, shape: Shape, settings: Mapping[str, Any], checked: CheckedOutputs
    ) -> Verdict:
        """Interleaved with the baseline; the rechecked runs' outputs are compared again, except where their
        bytes are those the check compared for the same input set."""
        started = time.monotonic()
        family, target = subject.family, subject.target
        try:  # again: profile and sanitize may have moved the trusted child on to other shapes
            prepared = self.prepare(family, subject.task, dict(shape.values), shape.id)
        except ChildFailed as exc:
            return _time_error("baseline", str(exc), started)
        if prepared.unavailable is not None:
            return baseline_unavailable(family, prepared.unavailable, time.monotonic() - started)
        rechecks: list[check.Comparison] = []

        def baseline(count: int, first: int) -> list[dict[str, Any]]:
            request = {"op": "time", "key": prepared.key, "runs": count, "first": first}
            try:
                reply = self.trusted().request(request, TRUSTED_TIMEOUT)
            except ChildFailed as exc:
                reply = {"ok": False, "error": str(exc)}
            if not reply["ok"]:
                self._restart_trusted()
                raise _Stopped(_time_error("baseline", reply["error"], started))
            runs: list[dict[str, Any]] = reply["runs"]
            return runs

        def recheck(index: int, files: dict[str, Path]) -> None:
            i = index % len(prepared.sets)
            label = f"timed run {index}"
            rechecks.extend(compare_saved(family, prepared, i, files, label, check.POISONS[0], checked.get(i)))

        try:
            runner.reload()  # device globals (a call counter) start fresh, as in any new process
            timed = interleave(runner, baseline, int(settings["runs"]), int(settings["warmup"]), recheck)
        except _Stopped as stop:
            return stop.verdict
        except RunnerFailed as exc:
            return _time_error("candidate", str(exc), started)
        own = subject.code.own
        compared = {c.digest for outputs in checked.values() for c in outputs.values()}
        problems = timing.problems_in(timed.candidate, set(own))
        drifted = [c.summary() for c in rechecks if not c.passes(family.matched_ratio)]
        if drifted:
            problems.append("outputs of timed runs are wrong: " + "; ".join(drifted))
        if timed.overruns:
            problems.append(f"timed runs wrote past the end of {', '.join(timed.overruns)}")
        data = {
            "libraries": prepared.libraries,
            "kernels": sorted({own.get(k["name"], k["name"]) for r in timed.candidate for k in r["kernels"]}),
            # the driver's kernels in place of the launch list's memsets and copies, timed as the call's work
            "driver_kernels": sorted({k["name"] for r in timed.candidate for k in r["driver"]}),
            "rechecked": timed.rechecked,
            # rechecks whose bytes were those the check compared: reused, not compared again
            "rechecks_as_checked": sum(c.digest in compared for c in rechecks),
        }
        return timing.verdict(
            timing.series(timed.candidate),
            timing.series(timed.baseline),
            family.baseline_library,
            target.name,
            family.flops(prepared.values),
            family.bytes(prepared.values),
            problems,
            data,
            time.monotonic() - started,
        )


def compare_saved(
    family: Family,
    prepared: Prepared,
    index: int,
    files: Mapping[str, str | Path],
    label: str,
    poison: int,
    known: Mapping[str, check.Comparison] | None = None,
) -> list[check.Comparison]:
    """The saved outputs of one call against the set's references; an output with the same bytes as one
    already compared for the same set (`known`) gets that comparison again, under another poison too: where
    this call left an element unwritten (its poison), the compared call's same bytes were a value far from
    any reference, already judged wrong.
    The files are deleted once read (a shape's outputs reach hundreds of MB, saved up to a dozen times)."""
    out = []
    for p in (p for p in prepared.params if p["role"] == "output"):
        shape = tuple(p["shape"])
        saved = Path(files[p["name"]])
        got = wire.load(saved, p["dtype"], shape)
        saved.unlink()
        digest = hashlib.sha256(got.data).hexdigest()
        prior = (known or {}).get(p["name"])
        if prior is not None and prior.digest == digest:
            out.append(replace(prior, label=label))
            continue
        expected = wire.load(Path(prepared.sets[index]["reference"][p["name"]]), "fp32", shape)
        tolerance = family.tolerance(p["dtype"])
        out.append(
            replace(check.compare(p["name"], label, got, p["dtype"], expected, tolerance, poison), digest=digest)
        )
    return out


@dataclass(frozen=True)
class Cubin:
    path: Path
    sha256: str


@dataclass(frozen=True)
class Code:
    """What the static stages established: the file of host code (a library, a Triton module: it only ever
    runs in the capture child), the candidate's own kernels (mangled → readable) and the cubins the runner
    loads."""

    host: Path
    own: dict[str, str]
    cubins: tuple[Cubin, ...]

    @property
    def owned(self) -> Own:
        return Own(frozenset(self.own), frozenset(c.sha256 for c in self.cubins))

    @classmethod
    def of(cls, static: Sequence[Verdict]) -> Code:
        by_stage = {v.stage: v for v in static}
        built, inspected = by_stage["build"], by_stage["inspect"]
        cubins = tuple(Cubin(Path(c["path"]), c["sha256"]) for c in inspected.data["cubins"])
        return cls(Path(built.data["host"]), dict(inspected.data["kernels"]), cubins)


@dataclass(frozen=True)
class Subject:
    """One candidate for one task on one target, with what its static stages established."""

    candidate: Candidate
    family: Family
    task: Task
    target: Target
    code: Code


class _Stopped(Exception):
    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message)
        self.verdict = verdict


def baseline_unavailable(family: Family, reason: str, seconds: float) -> Verdict:
    """The time stage when the chosen baseline cannot run here: skipped, never timed against another."""
    message = f"baseline {family.baseline_name} ({family.baseline_library}) cannot run here: {reason}"
    return Verdict("time", Status.SKIPPED, message, {"baseline": family.baseline_library}, seconds)


def _time_error(who: str, error: str, started: float) -> Verdict:
    status = Status.FAILED if who == "candidate" else Status.TOOL_UNAVAILABLE
    return Verdict("time", status, f"the {who} failed while timing: {error}", seconds=time.monotonic() - started)
