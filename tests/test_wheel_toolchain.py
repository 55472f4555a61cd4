"""The CUDA toolchain from NVIDIA's wheels alone, as on a machine without a CUDA toolkit (issue 17).

The real builds and inspections run in a mount namespace where every system toolkit the package could
find is hidden: tmpfs over `/usr/local/cuda*` and `$CUDA_HOME`, `/dev/null` over each CUDA tool on `PATH`,
`CUDA_HOME` unset. Without the wheels, or where `unshare` cannot make the namespace, they skip saying why.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_ptxbench.toolchain import RELEASE_TOOLS, TOOLS, Tool, find_tool, release_warning

from .conftest import KERNELS, ROOT, TASKS

WHEEL_HOMES = [home for home in dict.fromkeys(Path(p, "nvidia", "cu13") for p in sys.path if p) if home.is_dir()]
WHEEL_NVCC = next((home / "bin" / "nvcc" for home in WHEEL_HOMES if (home / "bin" / "nvcc").is_file()), None)
CUDA_VARIABLES = ("CUDA_HOME", "CUDA_PATH")
needs_wheels = pytest.mark.skipif(
    WHEEL_NVCC is None, reason="needs NVIDIA's toolchain wheels in this environment: pip install -e '.[toolchain]'"
)

# Runs inside the namespace: the package's own build() and inspect() on one kernel, and what it found.
BUILD_AND_INSPECT = """
import json, os, sys
from pathlib import Path
from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.stages.build import build
from pytest_ptxbench.stages.inspect import inspect
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import load_family
from pytest_ptxbench.toolchain import TOOLS, find_tool

kernel, tasks, workdir = map(Path, sys.argv[1:])
family, target = load_family(tasks / "gemm.yaml"), TARGETS["h100"]
built = build(Candidate.from_file("gemm-n128-k2048", "h100", kernel), family.launcher, target, workdir, 300)
inspected = built.passed and inspect(
    Path(built.data["host"]), built.data["cubins"], target, ("HGMMA.*.F32.BF16",), family.launcher.name, 120
)
folders = [*os.environ["PATH"].split(os.pathsep), "/usr/local/cuda/bin"]
print(json.dumps({
    "tools": {n: t and {"origin": t.origin, "path": str(t.path)} for n in TOOLS for t in [find_tool(n)]},
    "system_tools": [
        str(Path(d, n)) for d in folders if "nvidia/cu13" not in d for n in TOOLS if Path(d, n).is_file()
    ],
    "build": built.to_json(),
    "inspect": inspected and inspected.to_json(),
}))
"""


def _hiding_script(command: list[str]) -> str:
    """Shell lines that hide every system CUDA toolkit, then run `command`."""
    folders = [*Path("/usr/local").glob("cuda*"), *(Path(os.environ[v]) for v in CUDA_VARIABLES if v in os.environ)]
    hidden = sorted({f.resolve() for f in folders if f.is_dir()})
    tools = [Path(d, n) for d in os.environ.get("PATH", "").split(os.pathsep) if d for n in (*TOOLS, "ptxas")]
    kept = [*hidden, *(home.resolve() for home in WHEEL_HOMES)]  # hidden already, or the wheels themselves
    files = sorted({t for t in tools if t.is_file() and not any(t.resolve().is_relative_to(k) for k in kept)})
    lines = ["set -e"]
    lines += [f"mount -t tmpfs ptxbench-hidden {shlex.quote(str(f))}" for f in hidden]
    lines += [f"mount --bind /dev/null {shlex.quote(str(f))}" for f in files]
    return "\n".join([*lines, shlex.join(command)])


def _unshare() -> list[str]:
    own_mounts = ["unshare", "--mount", "--propagation", "private"]
    return own_mounts if os.geteuid() == 0 else ["unshare", "--user", "--map-root-user", *own_mounts[1:]]


def run_without_toolkit(command: list[str], probe: Path) -> subprocess.CompletedProcess[str]:
    """`command` in a mount namespace with no system toolkit, the checkout first on PYTHONPATH; skips where
    no namespace can be made."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux's unshare to hide the system CUDA toolkit")
    probe.mkdir(exist_ok=True)
    tried = subprocess.run([*_unshare(), "mount", "-t", "tmpfs", "probe", str(probe)], capture_output=True, text=True)
    if tried.returncode != 0:
        pytest.skip(f"cannot make a mount namespace to hide the system CUDA toolkit: {tried.stderr.strip()}")
    env = {k: v for k, v in os.environ.items() if k not in CUDA_VARIABLES and not k.startswith("PTXBENCH_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU machine's behaviour, GPU or not
    script = _hiding_script(command)
    return subprocess.run(
        [*_unshare(), "sh", "-c", script], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900
    )


@needs_wheels
def test_wgmma_kernel_builds_and_inspects_with_the_wheels_alone(tmp_path: Path) -> None:
    done = run_without_toolkit(
        [sys.executable, "-c", BUILD_AND_INSPECT, str(KERNELS / "wgmma_bf16.cu"), str(TASKS), str(tmp_path / "build")],
        tmp_path / "probe",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["system_tools"] == [], "the system toolkit was not hidden"
    assert {n: (t or {}).get("origin") for n, t in report["tools"].items() if n in RELEASE_TOOLS} == dict.fromkeys(
        RELEASE_TOOLS, "wheel"
    )
    assert report["build"]["status"] == "passed", report["build"]["message"]
    assert report["inspect"]["status"] == "passed", report["inspect"]["message"]
    assert report["inspect"]["data"]["found"] == {"HGMMA.*.F32.BF16": {"wgmma_kernel": ["HGMMA.64x8x16.F32.BF16"]}}


@needs_wheels
def test_main_job_runs_the_static_stages_with_the_wheels_alone(tmp_path: Path) -> None:
    """The README's main job, one small task: the header names the wheels, the reference builds and
    inspects, and environment.json records where each tool came from."""
    out = tmp_path / "run"
    argv = ["-m", "pytest", "tasks", "-k", "gemm-n128-k2048", "--ptx-shapes=visible", f"--ptx-out={out}", "-rs"]
    done = run_without_toolkit([sys.executable, *argv, "-p", "no:cacheprovider"], tmp_path / "probe")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    wheel_bin = str(WHEEL_NVCC.parent) if WHEEL_NVCC else ""
    header = [line for line in done.stdout.splitlines() if line.startswith("ptxbench tools: ")]
    assert header and header[0].startswith("ptxbench tools: nvcc ") and f"(wheel, {wheel_bin})" in header[0], header
    assert "ptxbench WARNING" not in done.stdout
    assert "2 skipped" in done.stdout and "passed: build, inspect (HGMMA.64x256x16.F32.BF16" in done.stdout
    environment = json.loads((out / "environment.json").read_text())
    assert {n: environment["tools"][n]["origin"] for n in RELEASE_TOOLS} == dict.fromkeys(RELEASE_TOOLS, "wheel")


@needs_wheels
def test_search_order_cuda_home_then_wheels_then_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert WHEEL_NVCC is not None
    elsewhere = tmp_path / "toolkit" / "bin"
    elsewhere.mkdir(parents=True)
    (elsewhere / "nvcc").symlink_to(WHEEL_NVCC)  # the real compiler, seen from another folder
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{elsewhere}{os.pathsep}{os.environ['PATH']}")
    found = find_tool("nvcc")
    assert found is not None and (found.origin, found.path) == ("wheel", WHEEL_NVCC)  # the wheels before PATH
    monkeypatch.setenv("CUDA_HOME", str(elsewhere.parent))
    found = find_tool("nvcc")
    assert found is not None and (found.origin, found.path) == ("CUDA_HOME", elsewhere / "nvcc")
    monkeypatch.delenv("CUDA_HOME")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p, "nvidia", "cu13") not in WHEEL_HOMES])
    found = find_tool("nvcc")
    assert found is not None and (found.origin, found.path) == ("PATH", elsewhere / "nvcc")


@needs_wheels
def test_header_warns_when_the_tools_come_from_two_releases(
    project: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case the issue met: nvcc of a system toolkit, the disassembler of the wheels."""
    assert WHEEL_NVCC is not None
    system_nvcc = Path("/usr/local/cuda/bin/nvcc")
    if not system_nvcc.is_file():
        pytest.skip("needs a system CUDA toolkit at /usr/local/cuda beside the wheels")
    wheel, system = Tool("nvcc", WHEEL_NVCC, "wheel"), Tool("nvcc", system_nvcc, "default")
    if wheel.version.split(".")[:2] == system.version.split(".")[:2]:
        pytest.skip("the system toolkit and the wheels are of one release")
    compiler_only = tmp_path / "toolkit" / "bin"
    compiler_only.mkdir(parents=True)
    (compiler_only / "nvcc").symlink_to(system_nvcc)
    monkeypatch.setenv("CUDA_HOME", str(compiler_only.parent))  # a toolkit without cuobjdump
    result = project.runpytest_subprocess("tasks", "--collect-only", "-k", "gemm-n128-k2048")
    result.stdout.fnmatch_lines(
        [
            f"ptxbench tools: nvcc {system.version} (CUDA_HOME, {compiler_only}); cuobjdump {wheel.version}, nvdisasm *"
            f" (wheel, {wheel.path.parent}); *",
            f"ptxbench WARNING: the CUDA tools come from different releases (nvcc {system.version}, cuobjdump *",
        ]
    )


def test_release_warning_compares_major_minor() -> None:
    # Versions as the tools print them: one release's tools differ in the patch level.
    assert release_warning({"nvcc": "13.0.88", "cuobjdump": "13.0.85", "nvdisasm": "13.0.85"}) is None
    assert release_warning({"nvcc": "13.5.37", "cuobjdump": "unknown"}) is None
    assert release_warning({"nvcc": "13.0.88", "cuobjdump": "13.5.37", "nvdisasm": "13.5.37"}) == (
        "the CUDA tools come from different releases (nvcc 13.0.88, cuobjdump 13.5.37, nvdisasm 13.5.37):"
        " use one toolkit that has them all (CUDA_HOME or the toolchain extra)"
    )
