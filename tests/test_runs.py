"""Reading run directories back: truncated, foreign and unknown-version directories give errors naming
the file, and the commands then write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_ptxbench.report.cli import main
from pytest_ptxbench.report.runs import RunError, load_run
from pytest_ptxbench.task.catalogue import Family

from .synthetic_runs import Turn, write_run


@pytest.fixture
def run(tmp_path: Path, gemm: Family) -> Path:
    return write_run(tmp_path / "run", gemm, "openai:fake-a", [[Turn(1, failing="build"), Turn(2, 1.2)]])


def test_a_valid_run_reads_back(run: Path) -> None:
    loaded = load_run(run)
    assert loaded.model == "openai:fake-a" and loaded.task_set == "0123456789abcdef"
    assert len(loaded.results) == 12 and [t.path.name for t in loaded.trajectories] == ["gemm-n128-k2048-h100-t1.json"]


def test_a_truncated_results_line_names_file_and_line(run: Path) -> None:
    results = run / "results.jsonl"
    text = results.read_text()
    results.write_text(text + text.splitlines()[0][:40])  # a worker killed mid-write
    with pytest.raises(RunError, match=rf"^{results}:13: not valid JSON \(a truncated line\?\)"):
        load_run(run)


def test_a_result_without_its_fields_names_them(run: Path) -> None:
    (run / "results.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(RunError, match=r"results.jsonl:1: missing field\(s\) task, target, shape, hidden"):
        load_run(run)


def test_a_truncated_trajectory_names_the_file(run: Path) -> None:
    path = run / "trajectories" / "gemm-n128-k2048-h100-t1.json"
    path.write_text(path.read_text()[:500])
    with pytest.raises(RunError, match=rf"^{path}: cannot read"):
        load_run(run)


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        (None, "environment.json: missing: .* is not a ptxbench run directory"),
        ('{"format": "ptxbench-run/2", "task_se', r"environment.json: not valid JSON \(truncated\?\)"),
        ('{"name": "my-package"}', "environment.json: no 'format' field: not a ptxbench run directory"),
        ('{"format": "other-tool/3"}', "format 'other-tool/3' is a foreign format; this reader knows 'ptxbench-run/2'"),
        ('{"format": "ptxbench-run/3"}', "format 'ptxbench-run/3' is a newer or older format"),
    ],
)
def test_foreign_or_unknown_directories_are_refused(tmp_path: Path, environment: str | None, message: str) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    if environment is not None:
        (folder / "environment.json").write_text(environment)
    with pytest.raises(RunError, match=message):
        load_run(folder)


def test_commands_on_bad_input_fail_clearly_and_write_nothing(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = run / "results.jsonl"
    results.write_text(results.read_text()[:-30])
    out, data = tmp_path / "report", tmp_path / "fixit.jsonl"
    assert main(["report", str(run), "--out", str(out)]) == 2
    assert f"ptxbench report: error: {results}:12: not valid JSON" in capsys.readouterr().err
    assert main(["fixit", str(run), "--out", str(data)]) == 2
    assert f"ptxbench fixit: error: {results}:12" in capsys.readouterr().err
    assert main(["compare", str(run), str(tmp_path / "nothing")]) == 2
    assert not out.exists() and not data.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
