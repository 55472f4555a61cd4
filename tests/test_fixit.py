"""`ptxbench fixit` and the report on a run recorded by pytest against a fake model server (build and
inspect real, GPU stages skipped): self-repair pairs, a teacher at another fake server whose repairs
are re-verified (one kept, one failing the build and one without a kernel dropped), filters, Parquet
loadable with pyarrow and Hugging Face `datasets`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.report import fixit
from pytest_ptxbench.report.cli import main
from pytest_ptxbench.report.runs import load_run
from pytest_ptxbench.report.scores import score_runs
from pytest_ptxbench.report.tables import tables as build_tables

from .conftest import KERNELS, REFERENCE_GEMM, ROOT, TASKS
from .fake_models import FakeModelServer, Step, fenced

pytest.importorskip("openai", reason="the openai SDK is not installed (pip install 'pytest-ptxbench[models]')")

SYNTAX_ERROR = KERNELS.joinpath("syntax_error.cu").read_text()
GETENV = KERNELS.joinpath("launcher_getenv.cu").read_text()


def digest(source: str) -> str:
    return Candidate("", "", source + "\n", "").digest  # extracted kernels end with one newline


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two trajectories of two turns: t1 fails the build then passes build and inspect (reference kernel);
    t2 fails inspect twice (getenv)."""
    project = tmp_path_factory.mktemp("project")
    shutil.copy(ROOT / "conftest.py", project / "conftest.py")
    shutil.copytree(TASKS, project / "tasks")
    (project / "pytest.ini").write_text("[pytest]\naddopts = --strict-markers\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PTXBENCH_", "PYTEST_"))}
    env.update(PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    out = project / "run"
    script = [Step(fenced(SYNTAX_ERROR)), Step(fenced(REFERENCE_GEMM)), Step(fenced(GETENV))]
    with FakeModelServer("openai", script) as server:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "tasks", "-p", "no:cacheprovider", "--ptx-model=openai-compatible:fake-model",
             f"--ptx-base-url={server.base_url}", "--ptx-turns=2", "--ptx-trajectories=2", f"--ptx-out={out}",
             "-k", "gemm-n128-k2048", "--ptx-shapes=visible"],
            cwd=project, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return out


def by_source(rows: list[dict[str, Any]]) -> list[tuple[str, str, int, int | None, str, str, str, str]]:
    return sorted(
        (
            m["source"], m["trajectory"], m["failed_turn"], m["repaired_turn"], m["failure_stage"],
            m["verification"], m["wrong_sha256"], m["repaired_sha256"],
        )
        for m in (r["metadata"] for r in rows)
    )  # fmt: skip


def test_report_of_a_recorded_run(recorded: Path) -> None:
    tables = {t.title: t for t in build_tables(score_runs([load_run(recorded)]))}
    model = "openai-compatible:fake-model"
    assert tables["Results"].rows == [
        # CPU: one kernel failed inspect (judged: not correct), the other's check could not run (not judged)
        [model, "h100", "gemm-n128-k2048", "2", *["0/1 = 0% [0%, 79%]; 1 not judged"] * 2, *["not judged"] * 4]
    ]
    assert tables["Failure stage per turn"].rows == [
        [model, "1", "2", "0", "1", "1", "0", "0", "0", "0", "0", "0"],
        [model, "2", "2", "0", "0", "1", "0", "0", "0", "0", "1", "0"],
    ]
    assert tables["Tokens and cost"].rows == [[model, "2", "4", "400", "200", "–", "–"]]  # fake-model has no price
    assert [r[3] for r in tables["By turn budget"].rows] == ["1"]  # two turns: only the budget of 1


def test_self_repairs_pair_a_failed_turn_with_its_later_fix(recorded: Path) -> None:
    rows = fixit.self_repairs([load_run(recorded)])
    assert by_source(rows) == [
        (
            "self-repair",
            "gemm-n128-k2048-h100-t1",
            1,
            2,
            "build",
            "static",
            digest(SYNTAX_ERROR),
            digest(REFERENCE_GEMM),
        )
    ]
    (row,) = rows
    assert [(m["role"], m["loss"]) for m in row["messages"]] == [
        ("system", False),
        ("user", False),
        ("assistant", True),
    ]
    prompt = row["messages"][1]["content"]
    assert prompt.startswith("# Task gemm-n128-k2048 on H100-class (sm_90a)")
    assert (
        SYNTAX_ERROR.strip() in prompt
        and 'build failed: nvcc exited 2:\ncandidate.cu(6): error: expected a ";"' in prompt
    )
    assert row["messages"][2]["content"] == f"```cuda\n{REFERENCE_GEMM.strip()}\n```"
    assert row["metadata"]["speedup"] is None and row["metadata"]["model"] == "openai-compatible:fake-model"
    assert fixit.self_repairs([load_run(recorded)], level="full") == []  # nothing ran on a GPU


def test_teacher_repairs_are_reverified_and_failures_dropped(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "fixit.jsonl"
    # The failed turns in order: t1 turn 1 (build), t2 turn 1 (inspect), t2 turn 2 (inspect).
    script = [Step(fenced(REFERENCE_GEMM)), Step(fenced(SYNTAX_ERROR)), Step("I would rather not.")]
    with FakeModelServer("openai", script) as teacher:
        code = main(
            ["fixit", str(recorded), "--out", str(out), "--teacher", "openai-compatible:teacher",
             "--base-url", teacher.base_url, "--tasks", str(recorded.parent / "tasks")]
        )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert len(teacher.requests) == 3
    asked = teacher.requests[1]["messages"][-1]["content"]
    assert GETENV.strip() in asked and "getenv" in asked.split("## What the harness found")[1]
    assert asked.endswith(fixit.REPAIR_REQUEST.format(suffix=".cu", fence="cuda"))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert by_source(rows) == [
        ("self-repair", "gemm-n128-k2048-h100-t1", 1, 2, "build", "static", digest(SYNTAX_ERROR), digest(REFERENCE_GEMM)),
        ("teacher:openai-compatible:teacher", "gemm-n128-k2048-h100-t1", 1, None, "build", "static",
         digest(SYNTAX_ERROR), digest(REFERENCE_GEMM)),
    ]  # fmt: skip
    printed = capsys.readouterr().out
    assert "teacher repairs kept: 1, dropped: 2" in printed
    assert "dropped gemm-n128-k2048-h100-t2 turn 1: the repair is not verified (build failed: nvcc exited 2" in printed
    assert "dropped gemm-n128-k2048-h100-t2 turn 2: no kernel in the reply" in printed
    assert "wrote 2 example(s)" in printed


def test_filters_and_balance(recorded: Path, tmp_path: Path, gemm: Any) -> None:
    from .synthetic_runs import Turn, write_run

    gpu = write_run(
        tmp_path / "gpu",
        gemm,
        "openai:fake-a",
        [[Turn(1, failing="check"), Turn(2, 1.4)], [Turn(3, failing="inspect"), Turn(4, 0.7)]],
    )
    rows = fixit.self_repairs([load_run(recorded), load_run(gpu)])
    assert sorted((r["metadata"]["failure_stage"], r["metadata"]["verification"], r["metadata"]["speedup"]) for r in rows) == [
        ("build", "static", None), ("check", "full", pytest.approx(1.4)), ("inspect", "full", pytest.approx(0.7)),
    ]  # fmt: skip
    assert [r["metadata"]["failure_stage"] for r in fixit.select(rows, stages=["check", "build"], min_speedup=1.0)] == [
        "check"
    ]
    assert len(fixit.select(rows, targets=["b200"])) == 0
    assert len(fixit.select(rows + rows)) == 3  # duplicates dropped
    # both runs are on one task: balance keeps all; a second task with one row cuts each task to one
    other = [{**r, "id": "0" + r["id"], "metadata": {**r["metadata"], "task": "gemm-n2048-k4096"}} for r in rows[:1]]
    balanced = fixit.select(rows + other, balance=True)
    assert sorted(r["metadata"]["task"] for r in balanced) == ["gemm-n128-k2048", "gemm-n2048-k4096"]


def test_parquet_loads_with_pyarrow_and_datasets(
    recorded: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pq = pytest.importorskip("pyarrow.parquet", reason="Parquet needs pyarrow (pip install 'pytest-ptxbench[report]')")
    out = tmp_path / "data" / "fixit.parquet"
    assert main(["fixit", str(recorded), "--out", str(out)]) == 0
    rows = fixit.self_repairs([load_run(recorded)])
    assert pq.read_table(out).to_pylist() == rows
    assert [p.name for p in out.parent.iterdir()] == ["fixit.parquet"]
    datasets = pytest.importorskip("datasets", reason="Hugging Face datasets is not installed")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    loaded = datasets.load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "cache"))
    assert loaded.num_rows == 1 and loaded[0]["id"] == rows[0]["id"]
    assert loaded[0]["messages"][2] == rows[0]["messages"][2]
    assert loaded[0]["metadata"]["failure_stage"] == "build"


def test_a_failed_write_leaves_nothing_behind(recorded: Path, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow", reason="Parquet needs pyarrow")
    rows = fixit.self_repairs([load_run(recorded)])
    blocked = tmp_path / "fixit.parquet"
    blocked.mkdir()  # the rename onto it fails after the temporary file is written
    with pytest.raises(IsADirectoryError):
        fixit.write(rows, blocked)
    assert [p.name for p in tmp_path.iterdir()] == ["fixit.parquet"] and not any(blocked.iterdir())


def test_fixit_never_overwrites_a_file_of_the_run(recorded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`fixit RUN --out RUN/results.jsonl` once emptied the run's results and exited 0."""
    results = recorded / "results.jsonl"
    before = results.read_bytes()
    assert main(["fixit", str(recorded), "--out", str(results)]) == 2
    assert capsys.readouterr().err == (
        f"ptxbench fixit: error: --out={results} is inside the run directory {recorded}; "
        "no command writes into a run directory\n"
    )
    assert results.read_bytes() == before and len(load_run(recorded).results) == 4  # 2 trajectories × 2 shapes
