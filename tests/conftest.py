"""Shared fixtures: the repository's task catalogue, the real CUDA toolchain, pytester projects."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.stages.build import build
from pytest_ptxbench.stages.inspect import inspect
from pytest_ptxbench.targets import TARGETS, Target
from pytest_ptxbench.task.catalogue import Family, load_family
from pytest_ptxbench.toolchain import find_tool
from pytest_ptxbench.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tasks"
KERNELS = Path(__file__).resolve().parent / "kernels"
DATA = Path(__file__).resolve().parent / "data"
PLANTED = KERNELS / "planted"  # cheating candidates, one per reward hack
REFERENCE_GEMM = (TASKS / "reference" / "h100" / "gemm.cu").read_text()  # the Hopper reference, as a model reply

# The main job's reason for skipping the reference GEMM on a CPU machine: what passed, then why the GPU stages did not run.
GEMM_SKIP_REASON = (
    "passed: build, inspect (HGMMA.64x256x16.F32.BF16, UTMALDG.2D in large::gemm_bf16_tn_kernel; "
    "HGMMA.64x128x16.F32.BF16, UTMALDG.2D, UTMALDG.2D.MULTICAST in narrow::gemm_narrow_kernel<1, 8>; "
    "HGMMA.64x128x16.F32.BF16, UTMALDG.2D, UTMALDG.2D.MULTICAST in narrow::gemm_narrow_kernel<2, 5>; "
    "HGMMA.64x160x16.F32.BF16, UTMALDG.2D in wide::gemm_wide_kernel); "
    "needs an sm_90 device (H100-class), found none"
)

# Planted variants of the reference GEMM: edits that must reach every path of its launcher (the GPU suite's
# n128 shape takes the BN = 128 kernel, the core shape the wide-tile one, the split cases the large-tile one);
# tests/test_stages_toolchain.py checks on CPU that nothing is left unedited. The large and wide kernels encode their
# descriptors in the same words, so one edit reaches both.
_LARGE_ENCODE = "if (!encode_kmajor(&tmap_a, A, M, K, BM) || !encode_kmajor(&tmap_b, B, N, K, BN))\n        return cudaErrorInvalidValue;"
_SMALL_ENCODE = (
    "if (!encode_kmajor(&ta, A, M, K, a_rows) || !encode_kmajor(&tb, B, N, K, BN)) return cudaErrorInvalidValue;"
)
ON_ANOTHER_STREAM = {  # every launch (and the tail split's memset) on the per-thread stream
    "config.stream = stream;": "config.stream = cudaStreamPerThread;",
    "sizeof(unsigned), stream)": "sizeof(unsigned), cudaStreamPerThread)",
}
DESCRIPTORS_CACHED_ON_M = {  # TMA descriptors encoded once per M, whatever the buffers (a public kernel does this)
    f"    CUtensorMap tmap_a, tmap_b;\n    {_LARGE_ENCODE}\n": (
        "    static int cached_m = -1;\n    static CUtensorMap tmap_a, tmap_b;\n"
        f"    if (M != cached_m) {{\n        {_LARGE_ENCODE}\n        cached_m = M;\n    }}\n"
    ),
    f"        CUtensorMap ta, tb;\n        {_SMALL_ENCODE}\n": (
        "        static int cached_m = -1;\n        static CUtensorMap ta, tb;\n"
        f"        if (M != cached_m) {{\n            {_SMALL_ENCODE}\n            cached_m = M;\n        }}\n"
    ),
}


def script(name: str) -> ModuleType:
    """scripts/<name>.py, imported as a module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where dataclasses look a module's names up
    spec.loader.exec_module(module)
    return module


def planted_variant(edits: dict[str, str], source: str = REFERENCE_GEMM) -> str:
    """`source` with each of `edits`' texts replaced; a text the source no longer holds stops the test."""
    for old, new in edits.items():
        assert old in source, f"the reference no longer holds {old!r}: update this planted variant"
        source = source.replace(old, new)
    return source


# Plain sm_90 (no `a` features): wgmma does not exist there.
PLAIN_SM90 = Target("sm90", "sm_90", (9, 0), "plain sm_90")


@pytest.fixture(scope="session")
def gemm() -> Family:
    return load_family(TASKS / "gemm.yaml")


def results(run: Path) -> list[dict[str, Any]]:
    """The rows of a run directory's results.jsonl, in the order written."""
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")
def toolchain() -> None:
    """The real compiler and disassembler; the README's test command installs them from wheels."""
    missing = [name for name in ("nvcc", "cuobjdump", "nvdisasm") if find_tool(name) is None]
    assert not missing, f"the CUDA toolchain is incomplete, missing {missing}: pip install -e '.[toolchain]'"


BuildAndInspect = Callable[..., tuple[Verdict, Verdict | None]]


@pytest.fixture
def build_and_inspect(toolchain: None, gemm: Family, tmp_path: Path) -> BuildAndInspect:
    """Build a kernel (a file of tests/kernels or the reference tree) for a target, then inspect it
    against `required` (default: the gemm family's opcodes for that target)."""

    def run(
        path: Path, target: Target | str = "h100", required: tuple[str, ...] | None = None, timeout: float = 300
    ) -> tuple[Verdict, Verdict | None]:
        target = TARGETS[target] if isinstance(target, str) else target
        candidate = Candidate.from_file("gemm-n7168-k5120", target.name, path)
        built = build(candidate, gemm.launcher, target, tmp_path / target.name, timeout)
        if not built.passed:
            return built, None
        wanted = gemm.opcodes.get(target.name, ()) if required is None else required
        return built, inspect(
            Path(built.data["host"]), built.data["cubins"], target, wanted, gemm.launcher.name, timeout=120
        )

    return run


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester folder that loads the plugin as a checkout does, with the task catalogue copied in."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    for name in [n for n in os.environ if n.startswith("PTXBENCH_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # these runs show the CPU-machine behaviour, GPU or not
    shutil.copy(ROOT / "conftest.py", pytester.path / "conftest.py")
    shutil.copytree(TASKS, pytester.path / "tasks")
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")
    return pytester
