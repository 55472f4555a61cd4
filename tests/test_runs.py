"""Reading run directories back: truncated, foreign and unknown-version directories give errors naming
the file, and the commands then write nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("hidden", "no", "field 'hidden' is \"no\"; expected true or false"),
        ("trajectory", "1", "field 'trajectory' is \"1\"; expected an integer"),
        ("trajectory", True, "field 'trajectory' is true; expected an integer"),
        ("shape_id", 972, "field 'shape_id' is 972; expected a string"),
        ("budget", "4", "field 'budget' is \"4\"; expected an integer or null"),
        ("outcome", "maybe", "field 'outcome' is \"maybe\"; expected one of passed, failed, skipped"),
        ("verdicts", {"build": "ok"}, 'field \'verdicts\' is {"build": "ok"}; expected a list'),
    ],
)
def test_a_field_of_the_wrong_type_names_line_field_and_value(run: Path, field: str, value: Any, message: str) -> None:
    results = run / "results.jsonl"
    lines = results.read_text().splitlines()
    lines[4] = json.dumps({**json.loads(lines[4]), field: value})
    results.write_text("\n".join(lines) + "\n")
    with pytest.raises(RunError, match=f"^{re.escape(f'{results}:5: {message}')}$"):
        load_run(run)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"status": "ok"},
            "field 'verdicts[1].status' is \"ok\"; expected one of passed, failed, skipped, tool-unavailable",
        ),
        ({"stage": None}, "field 'verdicts[1].stage' is null; expected a string"),
        ({"data": []}, "field 'verdicts[1].data' is []; expected an object"),
    ],
)
def test_a_verdict_of_the_wrong_type_names_line_field_and_value(
    run: Path, change: dict[str, Any], message: str
) -> None:
    results = run / "results.jsonl"
    lines = results.read_text().splitlines()
    row = json.loads(lines[0])
    row["verdicts"][1].update(change)
    lines[0] = json.dumps(row)
    results.write_text("\n".join(lines) + "\n")
    with pytest.raises(RunError, match=f"^{re.escape(f'{results}:1: {message}')}$"):
        load_run(run)


def test_an_older_directory_with_a_rerun_scores_each_tests_last_row(run: Path) -> None:
    """Before rows named their session, a rerun appended a second copy of every row: the reader keeps the last."""
    results = run / "results.jsonl"
    rows = [{k: v for k, v in json.loads(line).items() if k != "session"} for line in results.read_text().splitlines()]
    rerun = [{**r, "outcome": "failed", "reason": "rerun"} for r in rows]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows + rerun))
    loaded = load_run(run)
    assert len(loaded.results) == 12 and {(r["outcome"], r["reason"]) for r in loaded.results} == {("failed", "rerun")}


def test_a_malformed_sessions_file_names_the_file(run: Path) -> None:
    sessions = run / "sessions.json"
    sessions.write_text(
        json.dumps([{"id": "s", "started": "today", "collected": [1], "finished": None, "exit_status": 0}])
    )
    with pytest.raises(RunError, match=rf"^{sessions}: session 0: field 'collected' holds 1; expected test ids"):
        load_run(run)
    sessions.write_text('[{"id": "s"}]')
    with pytest.raises(RunError, match=rf"^{sessions}: session 0: expected an object with id, started, collected"):
        load_run(run)


@pytest.mark.parametrize("inside", ["results.jsonl", "report", "trajectories/x.jsonl", "."])
def test_no_command_writes_into_a_run_directory(
    run: Path, inside: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    out = run / inside
    assert main(["fixit", str(run), "--out", str(out)]) == 2
    assert main(["report", str(run), "--out", str(out), "--no-plots"]) == 2
    message = f"--out={out} is inside the run directory {run}; no command writes into a run directory"
    assert capsys.readouterr().err.splitlines() == [
        f"ptxbench fixit: error: {message}",
        f"ptxbench report: error: {message}",
    ]
    monkeypatch.chdir(run)
    assert main(["report", "."]) == 2  # the default --out, report/, from inside the run
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
