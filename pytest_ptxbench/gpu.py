"""The GPU stages of one candidate on one shape: check → profile → sanitize → time.

The pytest process only orchestrates: the trusted child (torch) makes inputs, references and baseline
times; a fresh evaluation child per candidate runs the library; ncu and compute-sanitizer run it in
one-shot children. Outputs are compared here, never in a process that holds the candidate.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .candidate import Candidate
from .checkout import CheckoutGuard
from .child import wire
from .stages import check, profile, sanitize, timing
from .targets import Target
from .task.catalogue import AxisValue, Family, Shape, Task
from .toolchain import find_library, find_tool
from .verdict import Status, Verdict
from .workers import PACKAGE_ROOT, Child, ChildFailed, Sandbox, child_command, child_environment, make_sandbox

TRUSTED_TIMEOUT = 900.0  # input sets and fp32 references of a large shape
BLOCKS = 5  # timed runs alternate baseline and candidate in this many blocks each


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


def resolved_params(family: Family, values: dict[str, AxisValue]) -> list[dict[str, Any]]:
    """The launcher's parameters with shapes and scalar values computed for one shape."""
    out = []
    for p in family.launcher.params:
        entry: dict[str, Any] = {"name": p.name, "role": p.role, "ctype": p.ctype, "dtype": p.dtype}
        if p.shape:
            entry["shape"] = [int(d(values)) for d in p.shape]
        if p.value is not None:
            value = p.value(values)
            entry["value"] = float(value) if p.ctype in ("float", "double") else int(value)
        out.append(entry)
    return out


class GpuStages:
    def __init__(self, settings: dict[str, Any], run_dir: Path) -> None:
        self.settings = settings
        self.run_dir = run_dir
        self._trusted: Child | None = None
        self._cached: dict[tuple[str, str, str], Verdict] = {}  # profile and sanitize, per (stage, kernel, task)
        # kernels that changed the checkout: every later evaluation fails too, whatever it reuses from caches
        self._tampered: dict[str, Verdict] = {}
        shm = Path("/dev/shm")
        self.scratch = Path(tempfile.mkdtemp(prefix="ptxbench-", dir=shm if shm.is_dir() else None))
        self.references = self.scratch / "references"  # written by the trusted child, hidden from candidates
        self.references.mkdir()
        mode = settings["sandbox"]
        self.sandbox = (
            make_sandbox([PACKAGE_ROOT, Path.cwd()], [run_dir, self.scratch], hidden=[self.references])
            if mode != "off"
            else Sandbox((), "none: --ptx-sandbox=off")
        )
        if mode == "namespaces" and not self.sandbox.prefix:
            self.close()
            raise ValueError(f"--ptx-sandbox=namespaces cannot confine children here: {self.sandbox.description}")
        trees = {
            (root / name).resolve() for root in (PACKAGE_ROOT, Path.cwd()) for name in ("pytest_ptxbench", "tasks")
        }
        self.guard = CheckoutGuard(Path.cwd(), tuple(sorted(t for t in trees if t.is_dir())))

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
                # where FlashInfer keeps the kernels it compiles at first use (~86 s each): not the scratch HOME
                "FLASHINFER_WORKSPACE_BASE": os.environ.get("FLASHINFER_WORKSPACE_BASE", str(Path.home())),
            }
            self._trusted = Child("trusted", folder, child_environment(folder, extra))
        return self._trusted

    def prepare(self, family: Family, task: Task, shape_values: dict[str, AxisValue], label: str) -> Prepared:
        values = {**task.axes, **shape_values}
        key = f"{task.name}/{label}"
        params = resolved_params(family, values)
        reply = self.trusted().request(
            {
                "op": "prepare",
                "key": key,
                "family": family.name,
                "reference": family.reference,
                "baseline": family.baseline,
                "requires": list(family.timed_against.requires),
                "params": params,
                "values": values,
                "seed": self.settings["seed"],
                "folder": str(self.scratch / "sets" / key),
                "references": str(self.references / key),
                "distributions": [{"name": d.name, **d.params} for d in family.distributions],
            },
            timeout=TRUSTED_TIMEOUT,
        )
        if not reply["ok"]:
            self._restart_trusted()
            raise ChildFailed(f"the trusted child could not prepare {key}: {reply['error']}")
        labels = [d.name for d in family.distributions]
        return Prepared(key, values, params, reply["sets"], labels, reply["libraries"], reply["unavailable"])

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
        library = Path(static[0].data["library"])
        own = dict(static[1].data["kernels"])  # mangled → readable
        try:
            prepared = self.prepare(family, task, dict(shape.values), shape.id)
        except ChildFailed as exc:
            return [Verdict("check", Status.TOOL_UNAVAILABLE, f"no reference: {exc}")]
        folder = self.scratch / "candidates" / candidate.digest / prepared.key
        env = child_environment(folder)
        load = self._load_request(family, library, prepared)
        before = self.guard.snapshot()
        child = Child("candidate", folder, env, prefix=self.sandbox.prefix)
        try:
            verdicts = [self._check(child, load, family, prepared, folder, float(settings["call_timeout"]))]
            if verdicts[0].passed:
                verdicts.append(self._once("profile", candidate, family, task, target, shape, own, library))
                verdicts.append(self._once("sanitize", candidate, family, task, target, shape, own, library))
                verdicts.append(self._time(child, family, task, target, shape, own, folder, settings))
        finally:
            child.close()
        judged = self.guard.judge(before, verdicts)
        if judged is not verdicts:
            self._tampered[candidate.digest] = judged[0]
        return judged

    def _load_request(self, family: Family, library: Path, prepared: Prepared) -> dict[str, Any]:
        cudart = find_library("libcudart.so.13")
        return {
            "op": "load",
            "cudart": str(cudart),
            "library": str(library),
            "launcher": family.launcher.name,
            "params": prepared.params,
            "workspace_bytes": int(family.workspace_bytes(prepared.values)),
        }

    def _check(
        self, child: Child, load: dict[str, Any], family: Family, prepared: Prepared, folder: Path, timeout: float
    ) -> Verdict:
        started = time.monotonic()
        comparisons: list[check.Comparison] = []
        changed: list[str] = []
        overruns: list[str] = []
        runs = [(i, check.POISONS[0]) for i in range(len(prepared.sets))] + [(0, check.POISONS[1])]
        try:
            for request in (load, {"op": "sets", "sets": [s["inputs"] for s in prepared.sets]}):
                reply = child.request(request, timeout)
                if not reply["ok"]:
                    return Verdict(
                        "check", Status.FAILED, f"{request['op']}: {reply['error']}", seconds=time.monotonic() - started
                    )
            for index, poison in runs:
                out = folder / f"check-{index}-{poison:02x}"
                reply = child.request({"op": "check", "set": index, "poison": poison, "outputs_dir": str(out)}, timeout)
                if not reply["ok"]:
                    return Verdict("check", Status.FAILED, reply["error"], seconds=time.monotonic() - started)
                changed += reply["inputs_changed"]
                overruns += reply["overruns"]
                label = f"{prepared.labels[index]}, poison 0x{poison:02X}"
                comparisons += self.compare_saved(family, prepared, index, reply["outputs"], label, poison)
        except ChildFailed as exc:
            return Verdict("check", Status.FAILED, str(exc), seconds=time.monotonic() - started)
        verdict = check.verdict(comparisons, family.matched_ratio, changed, overruns, time.monotonic() - started)
        verdict.data["sandbox"] = self.sandbox.description
        return verdict

    def compare_saved(
        self, family: Family, prepared: Prepared, index: int, files: dict[str, str], label: str, poison: int
    ) -> list[check.Comparison]:
        """The saved outputs of one call against the set's references; the files are deleted once read (a
        shape's outputs reach hundreds of MB, saved up to nine times)."""
        out = []
        for p in (p for p in prepared.params if p["role"] == "output"):
            shape = tuple(p["shape"])
            saved = Path(files[p["name"]])
            got = wire.load(saved, p["dtype"], shape)
            saved.unlink()
            expected = wire.load(Path(prepared.sets[index]["reference"][p["name"]]), "fp32", shape)
            out.append(
                check.compare(p["name"], label, got, p["dtype"], expected, family.tolerances[p["dtype"]], poison)
            )
        return out

    def _once(
        self,
        stage: str,
        candidate: Candidate,
        family: Family,
        task: Task,
        target: Target,
        shape: Shape,
        own: dict[str, str],
        library: Path,
    ) -> Verdict:
        """profile (at the first shape evaluated) and sanitize (at the sanitizer shape), once per kernel and task."""
        key = (stage, candidate.digest, task.name)
        if key in self._cached:
            return self._cached[key]
        tool = find_tool("ncu" if stage == "profile" else "compute-sanitizer")
        if tool is None:
            return Verdict(
                stage,
                Status.TOOL_UNAVAILABLE,
                f"requires {'ncu' if stage == 'profile' else 'compute-sanitizer'}, found none",
            )
        values = dict(shape.values) if stage == "profile" else dict(family.sanitizer_shape)
        try:
            prepared = self.prepare(family, task, values, "sanitizer" if stage == "sanitize" else shape.id)
        except ChildFailed as exc:
            return Verdict(stage, Status.TOOL_UNAVAILABLE, f"no inputs: {exc}")
        folder = self.run_dir / "logs" / candidate.digest / task.name / stage  # plan, result and tool logs are kept
        folder.mkdir(parents=True, exist_ok=True)
        plan, result = folder / "plan.json", folder / "result.json"
        plan.write_text(
            json.dumps(
                {
                    "result": str(result),
                    "requests": [
                        self._load_request(family, library, prepared),
                        {"op": "sets", "sets": [prepared.sets[0]["inputs"]]},
                        {
                            "op": "check",
                            "set": 0,
                            "poison": check.POISONS[0],
                            "outputs_dir": str(self.scratch / "once" / candidate.digest / stage),
                        },
                    ],
                }
            )
        )
        child = child_command("candidate", "--once", str(plan))
        env = child_environment(folder)
        if stage == "profile":
            verdict = profile.profile(
                tool,
                child,
                plan,
                result,
                env,
                own,
                family.opcodes.get(target.name, ()),
                profile.Work(family.flops(prepared.values), family.min_tensor_share),
                timeout=600,
            )
            verdict.data["shape"] = shape.id
        else:
            verdict = sanitize.sanitize(tool, child, plan, result, env, timeout=600)
            verdict.data["shape"] = dict(family.sanitizer_shape)
        shutil.rmtree(self.scratch / "once" / candidate.digest / stage, ignore_errors=True)  # outputs nobody reads
        self._cached[key] = verdict
        return verdict

    def _time(
        self,
        child: Child,
        family: Family,
        task: Task,
        target: Target,
        shape: Shape,
        own: dict[str, str],
        folder: Path,
        settings: Mapping[str, Any],
    ) -> Verdict:
        started = time.monotonic()
        try:
            prepared = self.prepare(family, task, dict(shape.values), shape.id)  # again: profile/sanitize moved on
        except ChildFailed as exc:
            return _time_error("baseline", str(exc), started)
        if prepared.unavailable is not None:
            return baseline_unavailable(family, prepared.unavailable, time.monotonic() - started)
        runs, warmup = int(settings["runs"]), int(settings["warmup"])
        timeout = float(settings["call_timeout"])
        per_block = max(1, runs // BLOCKS)
        candidate_runs: list[dict[str, Any]] = []
        baseline_runs: list[dict[str, Any]] = []
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

        def candidate(count: int, first: int, save_last: bool) -> dict[str, Any]:
            request = {
                "op": "time",
                "runs": count,
                "first": first,
                "save_last": save_last,
                "outputs_dir": str(folder / "timed"),
            }
            try:
                reply = child.request(request, timeout)
            except ChildFailed as exc:
                reply = {"ok": False, "error": str(exc)}
            if not reply["ok"]:
                raise _Stopped(_time_error("candidate", reply["error"], started))
            return reply

        try:
            baseline(warmup, 0)
            candidate(warmup, 0, save_last=False)
            first = warmup
            while len(candidate_runs) < runs:
                count = min(per_block, runs - len(candidate_runs))
                baseline_runs += baseline(count, first)
                reply = candidate(count, first, save_last=True)
                candidate_runs += reply["runs"]
                for index, files in reply["saved"].items():
                    i = int(index) % len(prepared.sets)
                    rechecks += self.compare_saved(family, prepared, i, files, f"timed run {index}", check.POISONS[0])
                first += count
        except _Stopped as stop:
            return stop.verdict
        problems = timing.problems_in(candidate_runs, set(own))
        drifted = [c.summary() for c in rechecks if not c.passes(family.matched_ratio)]
        if drifted:
            problems.append("outputs of timed runs are wrong: " + "; ".join(drifted))
        flops = family.flops(prepared.values)
        nbytes = family.bytes(prepared.values)
        data = {
            "libraries": prepared.libraries,
            "kernels": sorted({own.get(k["name"], k["name"]) for r in candidate_runs for k in r["kernels"]}),
        }
        return timing.verdict(
            timing.series(candidate_runs),
            timing.series(baseline_runs),
            family.baseline_library,
            target.name,
            flops,
            nbytes,
            problems,
            data,
            time.monotonic() - started,
        )


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
