"""The run directory as sessions write it: a rerun or a resume replaces each test's row, one session writes a
directory at a time (its xdist workers share it), a bad `--ptx-out` is one clear error at the start, a row
is never cut in half, and the sessions record what they collected and whether they finished."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_ptxbench.report.cli import main
from pytest_ptxbench.report.runs import load_run
from pytest_ptxbench.rundir import RunDirectory

from .conftest import KERNELS, REFERENCE_GEMM, ROOT, results
from .fake_models import FakeModelServer, Step, fenced

SELECT = ("tasks", "-k", "gemm-n128-k2048", "--ptx-shapes=visible")
IDS = ["gemm-n128-k2048-h100-m8192", "gemm-n128-k2048-h100-m972"]


def sessions(out: Path) -> list[dict[str, Any]]:
    recorded: list[dict[str, Any]] = json.loads((out / "sessions.json").read_text())
    return recorded


def row(test: str, session: str, budget: int | None = None) -> dict[str, Any]:
    return {"id": test, "budget": budget, "written_by": session}


def test_a_rerun_replaces_each_tests_row(project: pytest.Pytester) -> None:
    out = project.path / "run"
    for _ in range(2):
        project.runpytest_subprocess(*SELECT, f"--ptx-out={out}").assert_outcomes(skipped=2)
    first, second = sessions(out)
    assert first["collected"] == second["collected"] == IDS and first["id"] != second["id"]
    assert first["exit_status"] == second["exit_status"] == 0 and second["finished"] is not None
    rows = results(out)
    assert sorted(r["id"] for r in rows) == IDS and {r["session"] for r in rows} == {second["id"]}
    run = load_run(out)
    assert len(run.results) == 2 and run.cut_short is None


def test_a_resume_replaces_each_tests_row(project: pytest.Pytester) -> None:
    pytest.importorskip("openai", reason="the openai SDK is not installed")
    out = project.path / "run"
    script = [Step(fenced(KERNELS.joinpath("syntax_error.cu").read_text())), Step(fenced(REFERENCE_GEMM))]
    with FakeModelServer("openai", script) as server:
        args = [*SELECT, "--ptx-model=openai-compatible:fake-model", f"--ptx-base-url={server.base_url}"]
        args += ["--ptx-turns=2", f"--ptx-out={out}"]
        project.runpytest_subprocess(*args).assert_outcomes(skipped=2)
        project.runpytest_subprocess(*args, "--ptx-resume").assert_outcomes(skipped=2)
    assert len(server.requests) == 2  # the trajectory had used its turns: the resume asked nothing
    assert sorted(r["id"] for r in results(out)) == IDS
    assert {r["session"] for r in results(out)} == {sessions(out)[1]["id"]}


def test_rows_of_an_earlier_session_are_replaced_budget_rows_included(tmp_path: Path) -> None:
    """A hidden shape's test writes its budget rows, then its own: a later session that writes no budget row
    for the test (its final kernel was also the best within the budget) leaves none of the earlier ones."""
    earlier, later = RunDirectory(tmp_path), RunDirectory(tmp_path)
    earlier.append_result(row("a", "earlier", budget=1))
    earlier.append_result(row("a", "earlier"))
    earlier.append_result(row("b", "earlier"))
    later.append_result(row("a", "later"))
    later.append_result(row("a", "later"))  # the same test and budget again in one session: replaced too
    assert [(r["id"], r["budget"], r["written_by"]) for r in results(tmp_path)] == [
        ("b", None, "earlier"),
        ("a", None, "later"),
    ]


def test_two_sessions_cannot_write_one_run_directory(project: pytest.Pytester) -> None:
    out = project.path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom pathlib import Path\nfrom pytest_ptxbench.rundir import RunDirectory\n"
         f"held = RunDirectory(Path({str(out)!r})).claim('reference')\nprint('held', flush=True)\nsys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    try:
        refused = project.runpytest_subprocess(*SELECT, f"--ptx-out={out}")
    finally:
        holder.communicate("")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        [f"ERROR: --ptx-out={out}: another pytest session (pid {holder.pid} on *) is writing this run directory; *"]
    )
    assert not (out / "results.jsonl").exists()
    project.runpytest_subprocess(*SELECT, f"--ptx-out={out}").assert_outcomes(skipped=2)  # the holder has ended


def test_xdist_workers_of_one_session_share_its_run_directory(project: pytest.Pytester) -> None:
    out = project.path / "run"
    select = ["-k", "gemm-n128-k2048 or gemm-n256-k7168 or gemm-n7168-k5120", "--ptx-shapes=visible"]
    result = project.runpytest_subprocess("tasks", "-n", "2", "--dist", "loadgroup", f"--ptx-out={out}", *select)
    result.assert_outcomes(skipped=6)
    [session] = sessions(out)  # both workers added their collection to their controller's session
    rows = results(out)
    assert len(rows) == 6 and {r["worker"] for r in rows} <= {"gw0", "gw1"}
    assert {r["session"] for r in rows} == {session["id"]} and sorted(session["collected"]) == sorted(
        r["id"] for r in rows
    )
    assert session["exit_status"] == 0 and load_run(out).cut_short is None


def test_a_second_model_is_refused_an_earlier_models_run_directory(project: pytest.Pytester) -> None:
    out = project.path / "run"
    project.runpytest_subprocess(*SELECT, f"--ptx-out={out}").assert_outcomes(skipped=2)
    mine = project.mkdir("mine")
    refused = project.runpytest_subprocess(*SELECT, f"--ptx-out={out}", f"--ptx-model=file:{mine}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        [f"ERROR: --ptx-out={out}: holds a run of --ptx-model=reference ({out}/environment.json); *"]
    )
    assert len(results(out)) == 2


def _refused_at_start(result: pytest.RunResult, message: str) -> None:
    """One clear error before any test ran: no traceback, no row."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
    assert [line for line in result.errlines if line.startswith("ERROR")] == [message]
    assert "Traceback" not in "\n".join(result.outlines + result.errlines)
    assert not any("PASSED" in line or "SKIPPED" in line or "FAILED" in line for line in result.outlines)


@pytest.mark.parametrize(
    ("out", "why"),
    [("results.txt", "is a file, not a folder"), ("results.txt/run", "cannot be created: Not a directory")],
)
def test_out_that_is_a_file_is_one_error_at_the_start(project: pytest.Pytester, out: str, why: str) -> None:
    (project.path / "results.txt").write_text("my notes\n")
    result = project.runpytest_subprocess(*SELECT, f"--ptx-out={out}")
    _refused_at_start(result, f"ERROR: --ptx-out={out}: {why}")
    assert (project.path / "results.txt").read_text() == "my notes\n"


def _read_only(folder: Path) -> list[str]:
    """A command prefix under which `folder` cannot be written, for root too (a read-only bind mount in a
    user and mount namespace); a plain user gets a folder without write permission."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return []
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    prefix = ["unshare", "-rm", "sh", "-c", script, "sh", str(folder)]
    if shutil.which("unshare") is None or subprocess.run([*prefix, "true"], capture_output=True).returncode:
        pytest.skip("root without user and mount namespaces: no read-only folder to try")
    return prefix


@pytest.mark.parametrize("inside", [False, True])
def test_out_that_is_read_only_is_one_error_at_the_start(project: pytest.Pytester, inside: bool) -> None:
    folder = project.mkdir("readonly")
    prefix = _read_only(folder)
    out = folder / "run" if inside else folder
    try:
        result = project.run(
            *prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *SELECT, f"--ptx-out={out}"
        )
    finally:
        folder.chmod(0o755)
    if inside:
        why = "cannot be created: " + ("Read-only file system" if prefix else "Permission denied")
    else:
        why = "is on a read-only file system" if prefix else "is not writable (permissions)"
    _refused_at_start(result, f"ERROR: --ptx-out={out}: {why}")
    assert list(folder.iterdir()) == []


FILL_UNTIL_FULL = """
import json, resource, signal, sys
from pathlib import Path
from pytest_ptxbench.rundir import RunDirectory

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk fails
run = RunDirectory(Path(sys.argv[1]))
run.create()
resource.setrlimit(resource.RLIMIT_FSIZE, (4000, 4000))
for n in range(100):
    try:
        run.append_result({"id": f"test-{n}", "budget": None, "padding": "x" * 300})
    except OSError as exc:
        print(json.dumps({"recorded": n, "error": str(exc)}))
        break
"""


def test_a_row_that_does_not_fit_leaves_the_earlier_rows_whole(tmp_path: Path) -> None:
    """Files may grow to 4000 bytes only: the row that does not fit fails with a message naming the file and
    the test, and every earlier row stays whole (appended, the file ended in half a line)."""
    done = subprocess.run(
        [sys.executable, "-c", FILL_UNTIL_FULL, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, check=True
    )
    outcome = json.loads(done.stdout)
    assert outcome["recorded"] >= 5, outcome
    rows = results(tmp_path)  # every line parses
    assert [r["id"] for r in rows] == [f"test-{n}" for n in range(outcome["recorded"])]
    assert f"results.jsonl: cannot record test-{outcome['recorded']}: File too large" in outcome["error"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".write.lock", "results.jsonl"]  # no temporary left


def test_a_session_stopped_early_is_marked_cut_short(project: pytest.Pytester) -> None:
    out = project.path / "run"
    result = project.runpytest_subprocess(*SELECT, f"--ptx-out={out}", "--ptx-require-gpu", "-x")
    result.assert_outcomes(failed=1)
    [session] = sessions(out)
    assert session["collected"] == IDS and session["exit_status"] == 1
    run = load_run(out)
    assert run.cut_short == f"1 of 2 collected tests have no row ({IDS[1]})"
    report = project.path / "report"
    assert main(["report", str(out), "--out", str(report), "--no-plots"]) == 0
    assert f"CUT SHORT: 1 of 2 collected tests have no row ({IDS[1]})" in (report / "report.md").read_text()


def test_a_session_that_never_finished_is_marked_cut_short(project: pytest.Pytester) -> None:
    """A killed session leaves its record without an end: the run is cut short even where every test it
    recorded has its row."""
    out = project.path / "run"
    project.runpytest_subprocess(*SELECT, f"--ptx-out={out}").assert_outcomes(skipped=2)
    killed = RunDirectory(out)
    killed.record_collected(IDS)  # what a session killed after its collection leaves behind
    [_, record] = sessions(out)
    assert record["finished"] is None and record["exit_status"] is None
    assert (
        load_run(out).cut_short == f"the session started {record['started']} did not finish (killed, or still running)"
    )
