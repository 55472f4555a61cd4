"""The Triton recompile (harness code: no candidate code runs here): `python -m pytest_ptxbench.child.triton_ir
PLAN.json`.

The compile child runs the candidate's Python, so anything it writes could be the candidate's doing: a cubin
copied from a vendor library, or one Triton was told to take from a file (`ir_override`). Here every cubin it
wrote is compiled again by Triton from the Triton IR (`.ttir`) recorded beside it, in an empty cache, with the
recorded options less those that bring in outside code: `ir_override` is refused, and `extern_libs` may only be
Triton's own libdevice. A cubin is kept only when the two are the same bytes. The result file names, per cubin,
the problem or none.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import CUDABackend, CUDAOptions

OPTIONS = {f.name for f in dataclasses.fields(CUDAOptions)}


def options_of(recorded: dict[str, Any], target: GPUTarget) -> dict[str, Any] | str:
    """The recorded options Triton compiles with, or why they are refused."""
    options = {k: _tuples(v) for k, v in recorded.items() if k in OPTIONS}
    if options.pop("ir_override", None):
        return "it sets ir_override: Triton would take a file instead of compiling"
    default = CUDABackend(target).parse_options({}).extern_libs
    if options.pop("extern_libs", None) not in (None, default):
        return "it links libraries other than Triton's libdevice (extern_libs)"
    return options


def _tuples(value: Any) -> Any:
    """JSON's lists as the tuples Triton's options hold."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def recompile(cubin: Path, target: GPUTarget) -> str | None:
    """None when Triton compiles `cubin`'s recorded IR to the very same bytes; else why not."""
    ir, recorded = cubin.with_suffix(".ttir"), cubin.with_suffix(".json")
    if not ir.is_file() or not recorded.is_file():
        return "its Triton IR or options were not recorded"
    options = options_of(json.loads(recorded.read_text()), target)
    if isinstance(options, str):
        return options
    try:
        compiled = triton.compile(str(ir), target=target, options=options)
    except Exception as exc:  # a malformed IR or option is the candidate's: named in the verdict
        return f"Triton cannot compile its recorded IR ({type(exc).__name__}: {str(exc)[:300]})"
    if hashlib.sha256(compiled.asm["cubin"]).digest() != hashlib.sha256(cubin.read_bytes()).digest():
        return "Triton compiles its recorded IR to other code: the cubin did not come from Triton's compiler"
    return None


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    target = GPUTarget("cuda", int(plan["capability"]), 32)
    problems = {Path(c).name: recompile(Path(c), target) for c in plan["cubins"]}
    Path(plan["result"]).write_text(json.dumps({"problems": problems}))


if __name__ == "__main__":
    main()
