"""The checkout guard watches the whole checkout (`.git`, `tests/`, `scripts/`, `.ci/` included), but for what the
harness itself writes meanwhile: the run directories and the interpreter's caches."""

from __future__ import annotations

from pathlib import Path

import pytest

import pytest_ptxbench
from pytest_ptxbench.checkout import CheckoutGuard
from pytest_ptxbench.gpu import GpuStages
from pytest_ptxbench.settings import defaults

from .conftest import ROOT

FILES = (".git/HEAD", "tests/test_x.py", "scripts/bench.py", ".ci/ci.yml", "tasks/gemm.yaml", "conftest.py")
HARNESS_WRITES = ("runs/20260101-reference/results.jsonl", "pytest_ptxbench/__pycache__/x.pyc", "out/run/static.json")


def _checkout(root: Path) -> Path:
    for name in FILES + HARNESS_WRITES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("as checked out\n")
    return root


def test_a_write_anywhere_in_the_checkout_is_seen(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "checkout")
    guard = CheckoutGuard(checkout, skipped=(checkout / "out",))
    before = guard.snapshot()
    assert sorted(before) == sorted(str(checkout / name) for name in FILES)
    for name in (*FILES[:4], ".git/objects/ab/cdef", *HARNESS_WRITES):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text("written by a candidate\n")
    seen = [".ci/ci.yml", ".git/HEAD", ".git/objects/ab/cdef", "scripts/bench.py", "tests/test_x.py"]
    assert guard.changed(before) == [str(checkout / name) for name in seen]


def test_the_gpu_stages_watch_the_working_directory_and_the_harness_checkout_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _checkout(tmp_path / "project")
    monkeypatch.chdir(project)
    run_dir = project / "out" / "run"
    stages = GpuStages({**defaults(), "sandbox": "off"}, run_dir)
    try:
        package = Path(pytest_ptxbench.__file__).resolve().parent
        if package.parent == ROOT:  # run from the checkout (or an editable install): the checkout, `.git` and all
            assert stages.guard.trees == (ROOT,)
            watched = [ROOT / "pyproject.toml", ROOT / "tests" / "test_checkout_guard.py"]
        else:  # an installed copy (tox): the package's own folder
            assert stages.guard.trees == (package,)
            watched = [package / "__init__.py", package / "gpu.py"]
        before = stages.guard.snapshot()
        assert all(str(path) in before for path in watched)
        (project / "tests" / "test_x.py").write_text("written by a candidate\n")
        (run_dir / "static.json").write_text("written by the harness\n")
        assert stages.guard.changed(before) == [str(project.resolve() / "tests" / "test_x.py")]
    finally:
        stages.close()
