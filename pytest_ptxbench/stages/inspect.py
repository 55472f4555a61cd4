"""Stage *inspect*: what the built library holds, read from the very file that is run and timed.

Device side: the per-kernel SASS opcode inventory (cuobjdump); every required opcode, modifiers
included, must be present in some kernel of the target's architecture. Host side: imports only
from the allow-list, only allowed libraries, no raw system-call instructions, the launcher defined and
no other C-linkage function nor CUDA/CUPTI name (nothing that could shadow the measuring APIs).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from .. import allowlist, process
from ..parsers import objdump, sass
from ..targets import Target
from ..toolchain import find_tool
from ..verdict import Status, Verdict


def inspect(library: Path, target: Target, required: tuple[str, ...], launcher: str, timeout: float) -> Verdict:
    cuobjdump, host_objdump = find_tool("cuobjdump"), find_tool("objdump")
    if cuobjdump is None:
        return Verdict(
            "inspect",
            Status.TOOL_UNAVAILABLE,
            "requires cuobjdump (CUDA_HOME, PATH or the nvidia-cuda-cuobjdump wheel), found none",
        )
    if host_objdump is None:
        return Verdict("inspect", Status.TOOL_UNAVAILABLE, "requires binutils' objdump on PATH, found none")
    runs = {
        "sass": process.run([str(cuobjdump.path), "-sass", str(library)], timeout, env=cuobjdump.env()),
        "symbols": process.run([str(host_objdump.path), "-T", str(library)], timeout),
        "headers": process.run([str(host_objdump.path), "-p", str(library)], timeout),
        "host_code": process.run([str(host_objdump.path), "-d", "--no-show-raw-insn", str(library)], timeout),
    }
    for what, done in runs.items():
        if done.returncode != 0:
            state = "timed out" if done.timed_out else f"exited {done.returncode}"
            return Verdict(
                "inspect", Status.TOOL_UNAVAILABLE, f"{done.argv[0]} ({what}) {state}: {done.stderr.strip()[-500:]}"
            )
    (library.parent / "sass.txt").write_text(runs["sass"].stdout)
    cubins = _extract_cubins(cuobjdump.path, library, target.arch, timeout, cuobjdump.env())
    kernels = {n: k for n, k in sass.parse_sass(runs["sass"].stdout).items() if k.arch == target.arch}
    (library.parent / "inventory.json").write_text(
        json.dumps({n: dict(k.opcodes) for n, k in kernels.items()}, indent=1, sort_keys=True)
    )
    seconds = sum(done.seconds for done in runs.values())

    problems: list[str] = []
    found: dict[str, dict[str, list[str]]] = {}
    if not kernels:
        problems.append(f"no {target.arch} kernel in the library")
    if not cubins:
        problems.append(f"no {target.arch} cubin could be extracted from the library")
    for pattern in required:
        holders = sass.holders(pattern, kernels)
        if holders:
            found[pattern] = holders
        else:
            problems.append(f"missing {pattern}{_near_misses(pattern, kernels)}")

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

    names = _demangle(sorted(kernels), timeout)
    found = {p: {names[k]: m for k, m in holders.items()} for p, holders in found.items()}
    data = {
        "kernels": names,
        "found": found,
        "forbidden_imports": imports,
        "forbidden_libraries": libraries,
        "forbidden_definitions": definitions,
        "cuobjdump": cuobjdump.version,
        "cubins": cubins,
        "summary": _summary(found),
    }
    if problems:
        return Verdict("inspect", Status.FAILED, "; ".join(problems), data, seconds)
    return Verdict("inspect", Status.PASSED, _summary(found), data, seconds)


def _extract_cubins(
    cuobjdump: Path, library: Path, arch: str, timeout: float, env: dict[str, str]
) -> list[dict[str, str]]:
    """The library's cubins for `arch`, extracted into `cubins/` beside it, with their sha256: the runner
    loads exactly these (and refuses a file that changed), never the library's host code."""
    folder = library.parent / "cubins"
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
