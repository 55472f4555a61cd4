"""Stage *build* of a Triton candidate: Triton compiles it for the target, no GPU needed.

The candidate's `run` is called in the Triton compile child (`child/triton_compile.py`), confined like the
capture child (checkout read-only, no network, a process namespace of its own) with a scrubbed environment,
its home and Triton's cache inside the build folder. It is called at every shape of the family and at the
sanitizer shape, so every specialisation a judged shape launches is built; the cubins go to `cubins/`.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import process
from ..languages import run_params
from ..sandbox import Sandbox, make_sandbox
from ..targets import Target
from ..task.catalogue import AxisValue, Family, Task, resolved_params
from ..verdict import Status, Verdict
from ..workers import PACKAGE_ROOT, child_command, child_environment

LOG_TAIL_CHARS = 4000

BUILD_SEED = 0  # of the host-visible inputs `run` gets at build time
MAX_SHARED_BYTES = 227 << 10  # the shared memory one block may use on H100- and B200-class GPUs


def build_triton(
    source: str, family: Family, task: Task, target: Target, workdir: Path, timeout: float, sandbox: str = "auto"
) -> Verdict:
    """Compile the Triton candidate `source` for `target` in `workdir` (`sandbox` as `--ptx-sandbox`)."""
    if importlib.util.find_spec("triton") is None:
        return Verdict("build", Status.TOOL_UNAVAILABLE, "requires triton (pip install triton), not importable")
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    candidate, plan, result, cubins = (workdir / n for n in ("candidate.py", "plan.json", "result.json", "cubins"))
    home, cache = workdir / "home", workdir / "triton-cache"
    for stale in (cubins, home, cache):  # nothing an earlier build (or candidate) left is reused
        shutil.rmtree(stale, ignore_errors=True)
    home.mkdir()
    result.unlink(missing_ok=True)
    candidate.write_text(source)
    shapes = [(s.id, dict(s.values)) for s in family.shapes("all")] + [("sanitizer", dict(family.sanitizer_shape))]
    plan.write_text(
        json.dumps(
            {
                "candidate": str(candidate),
                "cubins": str(cubins),
                "result": str(result),
                "arch": target.arch,
                "capability": target.capability[0] * 10 + target.capability[1],
                "shapes": [_shape(family, family.values(task, values), label) for label, values in shapes],
            }
        )
    )
    confined = (
        make_sandbox([PACKAGE_ROOT, Path.cwd()], [workdir])
        if sandbox != "off"
        else Sandbox((), "none: --ptx-sandbox=off")
    )
    if sandbox == "namespaces" and not confined.prefix:
        raise ValueError(f"--ptx-sandbox=namespaces cannot confine the Triton compile here: {confined.description}")
    env = child_environment(home, {"TRITON_CACHE_DIR": str(cache)})
    argv = [*confined.prefix, *child_command("triton_compile", str(plan))]
    done = process.run(argv, timeout, cwd=workdir, env=env)
    log = workdir / "build.log"
    log.unlink(missing_ok=True)  # whatever the child left there (a link to elsewhere) is not written through
    log.write_text(f"$ {done.command}\n{done.stdout}{done.stderr}")
    data: dict[str, Any] = {
        "triton": importlib.metadata.version("triton"),
        "sandbox": confined.description,
        "log": str(log),
    }
    if done.timed_out:
        message = f"compiling and calling run at every shape did not finish within {timeout:.0f} s"
        return Verdict("build", Status.FAILED, message, data, done.seconds)
    if not result.is_file():
        tail = (done.stderr or done.stdout)[-LOG_TAIL_CHARS:].strip()
        message = f"the Triton compile exited {done.returncode} without a result:\n{tail}"
        return Verdict("build", Status.FAILED, message.strip(), {**data, "log_tail": tail}, done.seconds)
    try:
        compiled = json.loads(result.read_text())
        problems, launches = _judge(compiled, cubins)
    except (ValueError, KeyError, TypeError) as exc:
        message = f"the Triton compile wrote a malformed result ({type(exc).__name__}: {exc})"
        return Verdict("build", Status.FAILED, message, data, done.seconds)
    if problems:
        return Verdict("build", Status.FAILED, "; ".join(problems), data, done.seconds)
    every = [launch for shape in launches.values() for launch in shape]
    files = sorted({cubins / launch["cubin"] for launch in every})
    names = sorted({launch["kernel"] for launch in every})
    recompiled = _recompile(files, target, workdir, confined, home, timeout)
    seconds = done.seconds + recompiled.seconds
    if recompiled.problem:
        return Verdict("build", Status.FAILED, recompiled.problem, data, seconds)
    for launch in every:  # the cubins harness code compiled replace the compile child's
        launch["cubin"] = recompiled.renamed[launch["cubin"]]
    files = sorted({cubins / launch["cubin"] for launch in every})
    data |= {
        "cubins": [{"path": str(f), "sha256": hashlib.sha256(f.read_bytes()).hexdigest()} for f in files],
        "kernels": {name: name for name in names},
        "host": str(candidate),  # what the capture child imports, beside the build's cache (`triton-cache`)
        "launches": launches,
        "tensors": compiled["tensors"],
    }
    message = f"built {', '.join(names)} for {target.arch} ({len(files)} cubin{'s' if len(files) > 1 else ''})"
    return Verdict("build", Status.PASSED, message, data, seconds)


@dataclass(frozen=True)
class _Recompiled:
    problem: str | None
    renamed: dict[str, str]  # the compile child's cubin → the one compiled again in its place
    seconds: float


def _recompile(
    files: list[Path], target: Target, workdir: Path, confined: Sandbox, home: Path, timeout: float
) -> _Recompiled:
    """Every cubin compiled again from its recorded Triton IR by harness code (`child/triton_ir.py`), in a cache
    nothing of the compile child's reaches, and put in its place: no cubin the candidate's Python wrote is kept."""
    plan, result = workdir / "recompile.json", workdir / "recompiled.json"
    cache = Path(tempfile.mkdtemp(prefix="recompile-cache-", dir=workdir))  # made now: nothing planted can be in it
    for left in (plan, result):  # whatever the compile child left there (a link to elsewhere) is not written through
        left.unlink(missing_ok=True)
    capability = target.capability[0] * 10 + target.capability[1]
    plan.write_text(
        json.dumps(
            {
                "capability": capability,
                "cubins": [str(f) for f in files],
                "cache": str(workdir / "triton-cache"),
                "result": str(result),
            }
        )
    )
    env = child_environment(home, {"TRITON_CACHE_DIR": str(cache)})
    done = process.run([*confined.prefix, *child_command("triton_ir", str(plan))], timeout, cwd=workdir, env=env)
    shutil.rmtree(cache, ignore_errors=True)
    if done.timed_out or not result.is_file():
        tail = (done.stderr or done.stdout)[-LOG_TAIL_CHARS:].strip()
        problem = f"compiling the cubins again from their Triton IR failed (exit {done.returncode}):\n{tail}"
        return _Recompiled(problem, {}, done.seconds)
    reply = json.loads(result.read_text())
    wrong = [f"{name}: {why}" for name, why in sorted(reply["problems"].items())]
    return _Recompiled("; ".join(wrong) or None, reply["renamed"], done.seconds)


def _shape(family: Family, values: dict[str, AxisValue], label: str) -> dict[str, Any]:
    """One shape of the plan: `run`'s parameters, resolved, and the workspace's size."""
    names = set(run_params(family))
    params = [p for p in resolved_params(family, values) if p["name"] in names]
    # host-visible inputs: their lengths are the shape's; only which pages hold what depends on the run's seed
    host = family.host_inputs.tables(values, BUILD_SEED) if family.host_inputs else {}
    return {"label": label, "params": params, "workspace_bytes": int(family.workspace_bytes(values)), "host": host}


def _judge(compiled: dict[str, Any], cubins: Path) -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
    """The problems the child reported (an error loading the file, the first error of `run`, shapes where it
    launched nothing), or of what it built (too much shared memory, a cubin it did not write); and the launches
    of each shape."""
    if compiled["error"] is not None:
        return [f"loading candidate.py failed:\n{compiled['error']}"], {}
    failed = [s for s in compiled["shapes"] if s["error"] is not None]
    if failed:
        return [f"run failed at {_where(failed)}:\n{failed[0]['error']}"], {}
    idle = [s for s in compiled["shapes"] if not s["launches"]]
    if idle:
        return [f"run launched no kernel at {_where(idle)}"], {}
    launches = {s["label"]: s["launches"] for s in compiled["shapes"]}
    problems = []
    first: dict[str, tuple[str, dict[str, Any]]] = {}  # cubin → the first shape that launches it, and how
    for label, shape in launches.items():
        for launch in shape:
            first.setdefault(launch["cubin"], (label, launch))
    for name, (label, launch) in sorted(first.items()):
        if launch["shared"] > MAX_SHARED_BYTES:
            problems.append(
                f"{launch['kernel']} needs {launch['shared']} bytes of shared memory (at {label}); a block may use"
                f" at most {MAX_SHARED_BYTES}"
            )
        path = cubins / name
        if path.parent != cubins or not path.is_file():
            problems.append(f"the cubin of {launch['kernel']} (at {label}) is missing")
    return problems, launches


def _where(shapes: list[dict[str, Any]]) -> str:
    """`m70`, or `m70 (and 3 other shapes)`."""
    others = len(shapes) - 1
    return str(shapes[0]["label"]) + (f" (and {others} other shape{'s' if others > 1 else ''})" if others else "")
