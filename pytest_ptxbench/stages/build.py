"""Stage *build*: nvcc compiles the candidate with the harness's own flags into a shared object.

The task's launcher prototype is force-included, so a definition with another signature does not
compile. The compiler log (with `ptxas -v`) is kept beside the library, and the cubin nvcc itself compiled
from the source (kept from its intermediate files) goes to `cubins/`: the only device code inspected and
replayed, whatever else the library embeds.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from ..candidate import Candidate
from ..parsers import ptxas
from ..targets import Target
from ..task.catalogue import Launcher
from ..toolchain import RUNTIME_LIBRARY, driver_library, find_tool
from ..verdict import Status, Verdict
from . import compiler

CONTRACT_HEADER = """\
// Written by pytest-ptxbench: the launcher the task declares, included before the candidate.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
{declaration}
"""
LOG_TAIL_CHARS = 4000


def flags(target: Target) -> list[str]:
    """The harness's compiler flags; candidates do not choose their own."""
    return [
        target.gencode,
        "-O3",
        "-std=c++17",
        "-lineinfo",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        # The shared runtime by its versioned name, from nvcc's own toolkit: `-cudart shared` would need the
        # unversioned `libcudart.so`, which NVIDIA's wheels do not ship.
        "-cudart",
        "none",
        "-Xlinker",
        f"-l:{RUNTIME_LIBRARY}",
        "--ptxas-options=-v",
    ]


def build(
    candidate: Candidate,
    launcher: Launcher,
    target: Target,
    workdir: Path,
    timeout: float,
    sandbox: str = "auto",
    memory: int = compiler.MEMORY_CAP,
) -> Verdict:
    """Compile `candidate` in `workdir` with nvcc confined (`compiler.run`; `sandbox` as `--ptx-sandbox`,
    `memory` the address space of each compiler process)."""
    nvcc = find_tool("nvcc")
    if nvcc is None:
        return Verdict(
            "build",
            Status.TOOL_UNAVAILABLE,
            "requires nvcc (CUDA_HOME, the nvidia-cuda-nvcc wheel, PATH or /usr/local/cuda), found none",
        )
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "candidate.cu"
    source.write_text(candidate.source)
    header = workdir / "ptxbench_contract.h"
    header.write_text(CONTRACT_HEADER.format(declaration=launcher.declaration()))
    library, keep, cubins = workdir / "candidate.so", workdir / "keep", workdir / "cubins"
    library.unlink(missing_ok=True)
    for stale in (keep, cubins):
        shutil.rmtree(stale, ignore_errors=True)
    keep.mkdir()
    driver = driver_library()
    # Relative names: compiler messages then read `candidate.cu(6): error: ...`.
    argv = [str(nvcc.path), *flags(target), "-include", header.name, "-keep", "-keep-dir", keep.name]
    argv += ["-o", library.name, source.name]
    if driver is not None:
        argv += ["-Xlinker", str(driver)]
    done = compiler.run(nvcc.path, argv, workdir, timeout, sandbox, memory)
    outside = ", ".join(done.read_outside)
    said = f"the build read files outside the candidate's folder and the toolkit: {outside}\n" if outside else ""
    log = workdir / "build.log"
    log.write_text(f"$ {' '.join(argv)}\n{said}{done.stdout}{done.stderr}")
    data = {
        "log": str(log),
        "nvcc": nvcc.version,
        "flags": flags(target),
        "linked_driver": driver is not None,
        "resources": ptxas.parse_resources(done.stderr),
        "warnings": ptxas.warnings(done.stderr),
        "sandbox": done.sandbox,
        "memory_cap": memory,
    }
    if done.timed_out:
        return Verdict("build", Status.FAILED, f"nvcc did not finish within {timeout:.0f} s", data, done.seconds)
    if outside:
        return Verdict("build", Status.FAILED, said.strip(), {**data, "read_outside": done.read_outside}, done.seconds)
    compiled = keep / "candidate.cubin"  # nvcc's own device compilation of candidate.cu (one -gencode)
    if done.returncode != 0 or not library.is_file() or not compiled.is_file():
        tail = done.stderr[-LOG_TAIL_CHARS:].strip() or done.stdout[-LOG_TAIL_CHARS:].strip()
        if "out of memory" in tail:
            tail += f"\n(each compiler process may map at most {memory >> 20} MiB)"
        shutil.rmtree(keep, ignore_errors=True)
        return Verdict(
            "build", Status.FAILED, f"nvcc exited {done.returncode}:\n{tail}", {**data, "log_tail": tail}, done.seconds
        )
    cubins.mkdir()
    cubin = cubins / f"candidate.{target.arch}.cubin"
    shutil.move(compiled, cubin)
    shutil.rmtree(keep, ignore_errors=True)
    kept = [{"path": str(cubin), "sha256": hashlib.sha256(cubin.read_bytes()).hexdigest()}]
    return Verdict(
        "build",
        Status.PASSED,
        f"built {library.name} for {target.arch}",
        {**data, "host": str(library), "cubins": kept},
        done.seconds,
    )
