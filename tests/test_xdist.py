"""Several GPUs: one xdist worker per GPU, pinned from the caller's own list; a task's tests on one
worker; every worker's results in one run directory. The GPU list comes from a stand-in nvidia-smi that
replays the H200's recorded answer for two devices (no CUDA is started on this machine)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_ptxbench.device import Device, parse_devices
from pytest_ptxbench.pinning import exclusive, pinned, worker_index

from .conftest import DATA, KERNELS, TASKS, results
from .fake_models import FakeModelServer, Step, fenced

RECORDED = (DATA / "nvidia-smi-query.csv").read_text().strip()
TWO_GPUS = (
    RECORDED
    + "\n"
    + RECORDED.replace("0, NVIDIA", "1, NVIDIA").replace("GPU-cbd0dcec", "GPU-0f0f0f0f").replace("00:06.0", "00:07.0")
)


def _devices() -> list[Device]:
    return parse_devices(TWO_GPUS)


def test_worker_index() -> None:
    assert (worker_index("gw0"), worker_index("gw13"), worker_index(None), worker_index("master")) == (
        0,
        13,
        None,
        None,
    )


def test_pinning() -> None:
    devices = _devices()
    assert [pinned(i, None, devices) for i in range(3)] == [devices[0].uuid, devices[1].uuid, devices[0].uuid]
    assert [pinned(i, "3,1", devices) for i in range(2)] == ["3", "1"]  # the caller's own list, as given
    assert pinned(1, "MIG-aaaa, MIG-bbbb", devices) == "MIG-bbbb"
    assert pinned(0, "", devices) is None and pinned(0, None, []) is None


def test_one_gpu_is_held_by_one_worker_at_a_time(tmp_path: Path) -> None:
    device = _devices()[1]
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pytest_ptxbench.pinning import exclusive\n"
            "from pytest_ptxbench.device import parse_devices\n"
            f"device = parse_devices({TWO_GPUS!r})[1]\n"
            "with exclusive(device):\n    print('held', flush=True)\n    time.sleep(1.5)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parent.parent,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    started = time.monotonic()
    with exclusive(device):
        waited = time.monotonic() - started
    holder.wait(timeout=30)
    assert waited > 0.5


@pytest.fixture
def two_gpus(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """nvidia-smi on PATH answering for two H200s; no CUDA_VISIBLE_DEVICES from the caller."""
    bin_dir = project.path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat <<'EOF'\n{TWO_GPUS}\nEOF\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # when this suite itself runs under xdist
    return project


def test_one_worker_per_gpu_with_tasks_kept_together(two_gpus: pytest.Pytester) -> None:
    select = "gemm-n128-k2048 or gemm-n256-k7168 or gemm-n7168-k5120"
    result = two_gpus.runpytest_subprocess(
        "tasks", "-n", "auto", "--dist", "loadgroup", "--ptx-gpu=b200", "--ptx-shapes=visible", "-k", select
    )
    result.assert_outcomes(skipped=6)
    result.stdout.fnmatch_lines(["*2 workers*", "*= ptxbench =*"])
    [out] = (two_gpus.path / "runs").iterdir()  # one run directory for the controller and its workers
    rows = results(out)
    assert len(rows) == 6
    uuids = {d.index: d.uuid for d in _devices()}
    for row in rows:
        assert row["cuda_visible_devices"] == uuids[int(row["worker"].removeprefix("gw"))]
    for task in {r["task"] for r in rows}:
        assert len({r["worker"] for r in rows if r["task"] == task}) == 1, f"{task} was split across workers"


@pytest.mark.parametrize("dist", [(), ("--dist", "load")])
def test_plain_n_keeps_a_tasks_tests_on_one_worker(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, dist: tuple[str, ...]
) -> None:
    """`-n 2` alone (xdist's `load`) sent a task's two tests to two workers: each asked the model for the
    same trajectory. The plugin makes it `loadgroup`: one worker, one model call per turn."""
    pytest.importorskip("openai", reason="the openai SDK is not installed")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # when this suite itself runs under xdist
    out = project.path / "run"
    with FakeModelServer("openai", [Step(fenced((KERNELS / "syntax_error.cu").read_text()))]) as server:
        result = project.runpytest_subprocess(
            "tasks", "-n", "2", *dist, "--ptx-model=openai-compatible:fake-model", f"--ptx-base-url={server.base_url}",
            "--ptx-turns=1", "--ptx-shapes=visible", "-k", "gemm-n128-k2048", f"--ptx-out={out}",
        )  # fmt: skip
    result.assert_outcomes(failed=2)
    assert len(server.requests) == 1
    assert len({row["worker"] for row in results(out)}) == 1
    result.stdout.fnmatch_lines(["ptxbench: xdist ran with --dist loadgroup: each task's tests share one kernel*"])


@pytest.mark.parametrize("dist", ["each", "worksteal"])
def test_a_mode_that_splits_a_task_is_refused_for_a_model(project: pytest.Pytester, dist: str) -> None:
    select = ("-k", "gemm-n128-k2048", "--ptx-shapes=visible")
    result = project.runpytest_subprocess(
        "tasks", "-n", "2", "--dist", dist, "--ptx-model=openai-compatible:m", *select
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: --dist {dist} with --ptx-model=openai-compatible:m: the tests of one task would run on several"
            " workers, each asking the model for the same trajectory; use --dist loadgroup (what -n alone gives)"
        ]
    )


WORKER = """
import json, sys
from pathlib import Path
from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.pipeline import Pipeline
from pytest_ptxbench.rundir import RunDirectory
from pytest_ptxbench.settings import defaults
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import load_family

tasks, run = Path(sys.argv[1]), Path(sys.argv[2])
family = load_family(tasks / "gemm.yaml")
candidate = Candidate.from_file("gemm", "h100", tasks / "reference" / "h100" / "gemm.cu")
verdicts = Pipeline(RunDirectory(run), lambda: [], defaults()).static(candidate, family, family.tasks[0], TARGETS["h100"])
print(json.dumps([[v.stage, v.status.value, v.seconds] for v in verdicts]))
"""


def test_workers_of_one_run_build_a_source_once(
    toolchain: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers of one xdist run that reach the same source at once: one builds and inspects under the build
    folder's lock, the others reuse its verdicts. (Unlocked, each rebuilt candidate.so while another was
    disassembling it: `cuobjdump fatal: Invalid fatbin header`.) A later run builds again."""

    def workers(run_id: str, count: int) -> list[list[list[object]]]:
        monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", run_id)
        argv = [sys.executable, "-c", WORKER, str(TASKS), str(tmp_path / "run")]
        started = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(count)]
        return [json.loads(p.communicate(timeout=600)[0]) for p in started]

    first = workers("run-1", 3)
    assert all([stage for stage, _, _ in w] == ["build", "inspect"] for w in first), first
    assert all(status == "passed" for w in first for _, status, _ in w), first
    assert first[0] == first[1] == first[2]  # one build's seconds, shared
    (again,) = workers("run-2", 1)
    assert again[0][1] == "passed" and again[0][2] != first[0][0][2]  # another run: built anew
