"""The Triton recompile (harness code: no candidate code runs here): `python -m pytest_ptxbench.child.triton_ir
PLAN.json`.

The compile child runs the candidate's Python, so anything it writes could be the candidate's doing: a cubin
copied from a vendor library, or one Triton was told to take from a file (`ir_override`). So no cubin it wrote
is kept: each is compiled again by Triton from the Triton IR (`.ttir`) recorded beside it, in an empty cache,
with the recorded options less those that bring in outside code (`ir_override` is refused, and `extern_libs`
may only be Triton's own libdevice), and that cubin replaces it, in `cubins/` and in the build's Triton cache
(which the capture child loads from). Equal bytes are not required: ptxas for sm_100a does not always give the
same bytes twice. The result file names, per cubin, its new file name or the problem.
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


def plain(path: Path, folder: Path) -> bool:
    """Whether `path` is a regular file in `folder` (or below it), not a link: the compile child could have
    left links to files elsewhere, which this code must neither read nor write through."""
    return path.is_file() and not path.is_symlink() and path.resolve().is_relative_to(folder.resolve())


def recompile(cubin: Path, target: GPUTarget) -> bytes | str:
    """The cubin Triton compiles from `cubin`'s recorded IR and options, or why there is none."""
    ir, recorded = cubin.with_suffix(".ttir"), cubin.with_suffix(".json")
    if not all(plain(p, cubin.parent) for p in (cubin, ir, recorded)):
        return "its Triton IR or options were not recorded"
    options = options_of(json.loads(recorded.read_text()), target)
    if isinstance(options, str):
        return options
    try:
        compiled = triton.compile(str(ir), target=target, options=options)
    except Exception as exc:  # a malformed IR or option is the candidate's: named in the verdict
        return f"Triton cannot compile its recorded IR ({type(exc).__name__}: {str(exc)[:300]})"
    made: bytes = compiled.asm["cubin"]
    return made


def replace(cubin: Path, made: bytes, cache: Path) -> str:
    """`made` in place of `cubin` (its new name: `<kernel>-<sha256[:12]>.<arch>.cubin`, IR and options renamed
    alike) and of the cubin of every entry of the Triton cache `cache` compiled from the same IR."""
    ir = cubin.with_suffix(".ttir").read_text()
    for entry in cache.rglob("*.ttir"):
        cached = entry.with_suffix(".cubin")
        if plain(entry, cache) and plain(cached, cache) and entry.read_text() == ir:
            cached.write_bytes(made)
    kernel, _, rest = cubin.name.rpartition("-")
    name = f"{kernel}-{hashlib.sha256(made).hexdigest()[:12]}.{rest.split('.', 1)[1]}"
    for suffix in (".ttir", ".json"):  # a rename replaces a link of the new name, never what it points to
        cubin.with_suffix(suffix).rename((cubin.parent / name).with_suffix(suffix))
    cubin.unlink()
    (cubin.parent / name).unlink(missing_ok=True)
    (cubin.parent / name).write_bytes(made)
    return name


def main() -> None:
    plan = json.loads(Path(sys.argv[1]).read_text())
    target = GPUTarget("cuda", int(plan["capability"]), 32)
    renamed: dict[str, str] = {}
    problems: dict[str, str] = {}
    for path in map(Path, plan["cubins"]):
        made = recompile(path, target)
        if isinstance(made, str):
            problems[path.name] = made
        else:
            renamed[path.name] = replace(path, made, Path(plan["cache"]))
    Path(plan["result"]).write_text(json.dumps({"renamed": renamed, "problems": problems}))


if __name__ == "__main__":
    main()
