"""Stage *inspect*: what the built code holds, read from the very files that are run and timed.

Device side (a CUDA library's and a Triton build's cubins alike): the per-kernel SASS opcode inventory
(cuobjdump); every required opcode, modifiers included, must be present in some kernel of the target's
architecture. Host side, for a CUDA library only (Triton's host code is the harness's): imports only from the
allow-list, only allowed libraries, no raw system-call instructions, the launcher defined and no other
C-linkage function nor CUDA/CUPTI name (nothing that could shadow the measuring APIs).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import allowlist, process
from ..parsers import objdump, sass
from ..targets import Target
from ..toolchain import Tool, find_tool
from ..verdict import Status, Verdict

NO_CUOBJDUMP = "requires cuobjdump (CUDA_HOME, PATH or the nvidia-cuda-cuobjdump wheel), found none"


def inspect(
    library: Path,
    cubins: list[dict[str, str]],
    target: Target,
    required: tuple[str, ...],
    launcher: str,
    timeout: float,
) -> Verdict:
    """The device side over `cubins`, the cubin nvcc compiled from the source (the build's `cubins/`), and the
    host side over `library`; device code the library embeds besides (a fatbin planted in host code) fails."""
    cuobjdump, host_objdump = find_tool("cuobjdump"), find_tool("objdump")
    if cuobjdump is None:
        return Verdict("inspect", Status.TOOL_UNAVAILABLE, NO_CUOBJDUMP)
    if host_objdump is None:
        return Verdict("inspect", Status.TOOL_UNAVAILABLE, "requires binutils' objdump on PATH, found none")
    runs = {
        "symbols": process.run([str(host_objdump.path), "-T", str(library)], timeout),
        "headers": process.run([str(host_objdump.path), "-p", str(library)], timeout),
        "host_code": process.run([str(host_objdump.path), "-d", "--no-show-raw-insn", str(library)], timeout),
    }
    for what, done in runs.items():
        if done.returncode != 0:
            return _tool_failed(done, what)
    device = _cubins_side(cubins, target, required, timeout, cuobjdump)
    if isinstance(device, Verdict):
        return device
    problems, data, seconds = device
    embedded = _extract_cubins(cuobjdump.path, library, target.arch, timeout, cuobjdump.env())
    if not embedded:
        problems.append(f"no {target.arch} cubin could be extracted from the library")
    planted = {c["sha256"] for c in embedded} - {c["sha256"] for c in cubins}
    if planted:
        problems.append(
            f"the library embeds {len(planted)} {target.arch} cubin(s) besides the one nvcc compiled from candidate.cu"
            " (device code planted in host code is never the candidate's)"
        )
    seconds += sum(done.seconds for done in runs.values())

    symbols = objdump.parse_dynamic_symbols(runs["symbols"].stdout)
    imports = allowlist.forbidden_imports(s.name for s in symbols if s.undefined)
    if imports:
        problems.append(f"host code imports symbols outside the allow-list: {', '.join(imports)}")
    definitions = allowlist.forbidden_definitions(((s.name, s.function) for s in symbols if not s.undefined), launcher)
    if definitions:
        problems.append(
            f"host code defines symbols that could shadow library APIs: {', '.join(definitions)} (only the launcher"
            " may be a C-linkage function; cuda*, cu*, cupti*, nvtx* and nvml* names are reserved)"
        )
    if not any(s.name == launcher and not s.undefined and s.function for s in symbols):
        problems.append(f'launcher {launcher} is not defined (it must be an extern "C" function)')
    libraries = allowlist.forbidden_libraries(objdump.parse_needed(runs["headers"].stdout))
    if libraries:
        problems.append(f"links libraries outside the allow-list: {', '.join(libraries)}")
    raw = objdump.find_instructions(runs["host_code"].stdout, set(allowlist.FORBIDDEN_HOST_INSTRUCTIONS))
    if raw:
        problems.append(
            "raw system-call instructions in host code: "
            + ", ".join(sorted({f"{i.mnemonic} in {i.function}" for i in raw}))
        )
    data |= {"forbidden_imports": imports, "forbidden_libraries": libraries, "forbidden_definitions": definitions}
    return _verdict(problems, data, seconds)


def inspect_cubins(cubins: list[dict[str, str]], target: Target, required: tuple[str, ...], timeout: float) -> Verdict:
    """The device-side rules of `inspect` over the cubins a Triton build wrote. No host side: the host code
    that launches them is the harness's."""
    cuobjdump = find_tool("cuobjdump")
    if cuobjdump is None:
        return Verdict("inspect", Status.TOOL_UNAVAILABLE, NO_CUOBJDUMP)
    device = _cubins_side(cubins, target, required, timeout, cuobjdump)
    return device if isinstance(device, Verdict) else _verdict(*device)


def _cubins_side(
    cubins: list[dict[str, str]],
    target: Target,
    required: tuple[str, ...],
    timeout: float,
    cuobjdump: Tool,
) -> tuple[list[str], dict[str, Any], float] | Verdict:
    """The problems, data and seconds of the device-side rules over `cubins` (`{"path", "sha256"}` each, in a
    build's `cubins/` folder: the listing and inventory go beside it), or the verdict when a tool failed."""
    if not cubins:
        return Verdict("inspect", Status.FAILED, "the build wrote no cubin", {"cubins": cubins})
    problems: list[str] = []
    listings: list[str] = []
    seconds = 0.0
    for cubin in cubins:
        path = Path(cubin["path"])
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != cubin["sha256"]:
            problems.append(f"{path.name} is no longer the cubin the build wrote")
            continue
        done = process.run([str(cuobjdump.path), "-sass", str(path)], timeout, env=cuobjdump.env())
        if done.returncode != 0:
            return _tool_failed(done, f"sass of {path.name}")
        listings.append(done.stdout)
        seconds += done.seconds
    folder = Path(cubins[0]["path"]).parent.parent
    device_problems, device = _device_side(listings, target, required, "the cubins", folder, timeout)
    data = {**device, "cuobjdump": cuobjdump.version, "cubins": cubins}
    return problems + device_problems, data, seconds


def _device_side(
    listings: Sequence[str], target: Target, required: tuple[str, ...], source: str, folder: Path, timeout: float
) -> tuple[list[str], dict[str, Any]]:
    """The device-side rules over `cuobjdump -sass` listings of `source`: the opcode inventory of each kernel of
    the target's architecture (a kernel in several listings, as specialisations of one Triton kernel are, has
    the union of theirs), and every required opcode in some kernel. The listings and the inventory are written
    to `folder` (sass.txt, inventory.json). Returns the problems, and the data: kernels (symbol → readable
    name), found (pattern → kernel → mnemonics) and summary."""
    kernels: dict[str, sass.Kernel] = {}
    for listing in listings:
        for name, kernel in sass.parse_sass(listing).items():
            if kernel.arch != target.arch:
                continue
            if name in kernels:
                kernels[name].opcodes |= kernel.opcodes
            else:
                kernels[name] = kernel
    (folder / "sass.txt").write_text("\n".join(listings))
    (folder / "inventory.json").write_text(
        json.dumps({n: dict(k.opcodes) for n, k in kernels.items()}, indent=1, sort_keys=True)
    )
    problems: list[str] = []
    found: dict[str, dict[str, list[str]]] = {}
    if not kernels:
        problems.append(f"no {target.arch} kernel in {source}")
    for pattern in required:
        holders = sass.holders(pattern, kernels)
        if holders:
            found[pattern] = holders
        else:
            problems.append(f"missing {pattern}{_near_misses(pattern, kernels)}")
    names = _demangle(sorted(kernels), timeout)
    found = {p: {names[k]: m for k, m in holders.items()} for p, holders in found.items()}
    return problems, {"kernels": names, "found": found, "summary": _summary(found)}


def _verdict(problems: list[str], data: dict[str, Any], seconds: float) -> Verdict:
    if problems:
        return Verdict("inspect", Status.FAILED, "; ".join(problems), data, seconds)
    return Verdict("inspect", Status.PASSED, data["summary"], data, seconds)


def _tool_failed(done: process.Completed, what: str) -> Verdict:
    state = "timed out" if done.timed_out else f"exited {done.returncode}"
    return Verdict("inspect", Status.TOOL_UNAVAILABLE, f"{done.argv[0]} ({what}) {state}: {done.stderr.strip()[-500:]}")


def _extract_cubins(
    cuobjdump: Path, library: Path, arch: str, timeout: float, env: dict[str, str]
) -> list[dict[str, str]]:
    """The cubins for `arch` the library embeds, extracted into `embedded/` beside it, with their sha256 (to
    compare with the one nvcc compiled from the source)."""
    folder = library.parent / "embedded"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    done = process.run([str(cuobjdump), "-xelf", "all", str(library.resolve())], timeout, cwd=folder, env=env)
    if done.returncode != 0:
        return []
    return [
        {"path": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        for path in sorted(folder.glob(f"*.{arch}.cubin"))
    ]


def _demangle(mangled: list[str], timeout: float) -> dict[str, str]:
    """Mangled kernel name → its readable name without parameters (`(anonymous namespace)::gemm_kernel`);
    the mangled name itself where c++filt is missing."""
    cxxfilt = find_tool("c++filt")
    if cxxfilt is None or not mangled:
        return {m: m for m in mangled}
    done = process.run([str(cxxfilt.path), *mangled], timeout)
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(mangled):
        return {m: m for m in mangled}
    readable = (line.replace("(anonymous namespace)::", "").removeprefix("void ").split("(")[0] for line in lines)
    return dict(zip(mangled, readable, strict=True))


def _near_misses(pattern: str, kernels: dict[str, sass.Kernel]) -> str:
    """For a missing `HGMMA.*.F32.BF16`: the HGMMA variants that are there (other operand types)."""
    base = pattern.split(".")[0]
    near = sorted({m for k in kernels.values() for m in k.opcodes if m.split(".")[0] == base})
    return f" (found {', '.join(near)}: other modifiers)" if near else ""


def _summary(found: dict[str, dict[str, list[str]]]) -> str:
    """`HGMMA.64x256x16.F32.BF16, UTMALDG.2D in gemm_kernel`."""
    by_kernel: dict[str, list[str]] = {}
    for holders in found.values():
        for kernel, mnemonics in holders.items():
            by_kernel.setdefault(kernel, []).extend(mnemonics)
    return "; ".join(f"{', '.join(dict.fromkeys(m))} in {k}" for k, m in sorted(by_kernel.items()))
