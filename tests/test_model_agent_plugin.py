"""Model agents as a user drives them: pytest on the task catalogue with a provider at a local fake
server, a replay of that run, a run killed and resumed, and the collection errors of bad settings."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_ptxbench.verdict import STAGES

from .conftest import GEMM_SKIP_REASON, KERNELS, REFERENCE_GEMM, results
from .fake_models import FakeModelServer, Step, fenced

SECRET = "sk-test-secret-0123456789"
SELECT = ("-k", "gemm-n128-k2048", "--ptx-shapes=visible", "-rs")
PROVIDERS = {  # provider → (SDK module, key variable or None)
    "openai": ("openai", None),  # a local OpenAI-compatible server needs no key
    "anthropic": ("anthropic", "ANTHROPIC_API_KEY"),
    "gemini": ("google.genai", "GEMINI_API_KEY"),
}


def rows(run: Path) -> list[dict[str, Any]]:
    return sorted(results(run), key=lambda r: r["id"])


def trajectory(run: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((run / "trajectories" / "gemm-n128-k2048-h100-t1.json").read_text())
    return record


def judged(record: dict[str, Any]) -> list[list[tuple[str, str, str]]]:
    return [[(v["stage"], v["status"], v["message"]) for v in t["verdicts"]] for t in record["turns"]]


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_provider_run_then_replay(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, keys: None, provider: str
) -> None:
    module, key = PROVIDERS[provider]
    pytest.importorskip(module, reason=f"the {module} SDK is not installed (pip install 'pytest-ptxbench[models]')")
    if key:
        monkeypatch.setenv(key, SECRET)
    out, again = project.path / "run", project.path / "again"
    script = [
        Step(fenced(KERNELS.joinpath("syntax_error.cu").read_text())),
        Step(fenced(REFERENCE_GEMM), reasoning="use TMA"),
    ]
    with FakeModelServer(provider, script) as server:
        result = project.runpytest_subprocess(
            "tasks", f"--ptx-model={provider}:fake-model", f"--ptx-base-url={server.base_url}",
            "--ptx-turns=2", f"--ptx-out={out}", *SELECT,
        )  # fmt: skip
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([f"SKIPPED [[]2[]] *: {GEMM_SKIP_REASON}"])
    assert len(server.requests) == 2  # one trajectory serves both shape tests

    record = trajectory(out)
    assert [[(s, st) for s, st, _ in turn] for turn in judged(record)] == [
        [("build", "failed")],
        [("build", "passed"), ("inspect", "passed")] + [(s, "skipped") for s in STAGES[2:]],
    ]
    assert record["turns"][1]["reply"]["reasoning"] == "use TMA"
    assert record["info"]["config"]["model"]["provider"] == provider
    results = rows(out)
    assert [r["outcome"] for r in results] == ["skipped", "skipped"]
    assert {r["candidate"]["origin"] for r in results} == {f"{provider}:fake-model gemm-n128-k2048-h100-t1 turn 2"}
    assert {r["candidate"]["sha256"] for r in results} == {record["turns"][1]["sha256"]}
    assert not [p for p in out.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]

    replayed = project.runpytest_subprocess("tasks", f"--ptx-model=replay:{out}", f"--ptx-out={again}", *SELECT)
    replayed.assert_outcomes(skipped=2)
    assert judged(trajectory(again)) == judged(record)
    assert [(r["id"], r["outcome"], r["reason"], r["candidate"]["sha256"]) for r in rows(again)] == [
        (r["id"], r["outcome"], r["reason"], r["candidate"]["sha256"]) for r in results
    ]
    assert trajectory(again)["info"]["ptxbench"]["replay_of"]["run"] == str(out)
    environment = json.loads((again / "environment.json").read_text())
    assert environment["settings"]["model"] == f"replay:{out}"


def test_missing_key_skips_with_the_variable(project: pytest.Pytester, keys: None) -> None:
    pytest.importorskip("anthropic", reason="the anthropic SDK is not installed")
    result = project.runpytest_subprocess("tasks", "--ptx-model=claude", *SELECT)
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["SKIPPED [[]2[]] *: --ptx-model=claude: set ANTHROPIC_API_KEY to call anthropic"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--ptx-model=replay:/no/such/run",),
            "--ptx-model=replay:/no/such/run: /no/such/run has no trajectories/ folder*",
        ),
        (("--ptx-model=gpt", "--ptx-resume"), "--ptx-resume needs --ptx-out=<the interrupted run's directory>"),
        (
            ("--ptx-model=openai:my-model", "--ptx-spend-cap=5"),
            "--ptx-model=openai:my-model: a spend cap needs the price of my-model: give it with --ptx-prices=*",
        ),
    ],
)
def test_bad_model_settings_stop_collection(project: pytest.Pytester, args: tuple[str, ...], message: str) -> None:
    pytest.importorskip("openai", reason="the openai SDK is not installed")
    result = project.runpytest_subprocess("tasks", "--collect-only", *args)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([message])


def test_a_provider_error_reads_as_one_not_as_an_earlier_build_error(project: pytest.Pytester, keys: None) -> None:
    """The provider fails at turn 2 after turn 1's kernel failed to build: the tests fail for the provider's
    error, in the summary table too, not for turn 1's compiler log."""
    pytest.importorskip("openai", reason="the openai SDK is not installed")
    script = [Step(fenced(KERNELS.joinpath("syntax_error.cu").read_text())), Step(status=503)]
    with FakeModelServer("openai", script) as server:
        result = project.runpytest_subprocess(
            "tasks", "--ptx-model=openai-compatible:fake-model", f"--ptx-base-url={server.base_url}",
            "--ptx-turns=3", "--ptx-max-retries=0", *SELECT,
        )  # fmt: skip
    result.assert_outcomes(failed=2)
    assert len(server.requests) == 2
    result.stdout.fnmatch_lines(
        [
            "*_ test_task?gemm-n128-k2048-h100-m8192? _*",
            "openai-compatible:fake-model: provider error at turn 2: openai-compatible:fake-model: "
            "InternalServerError: *503*; the best kernel before it (turn 1) failed build; see *",
            "gemm-n128-k2048 * m972 * - * - * - * - * - * - * failed * provider error at turn 2: *",
        ]
    )
    assert "nvcc exited" not in result.stdout.str() and "build failed" not in result.stdout.str()


def test_a_cap_skips_the_tasks_it_left_untried_and_says_so(project: pytest.Pytester, keys: None) -> None:
    """The first trajectory's call reaches the token cap: its kernel is judged; the second trajectory is never
    tried, so its tests skip with the cap as their reason; the console says the cap was reached."""
    pytest.importorskip("openai", reason="the openai SDK is not installed")
    out = project.path / "run"
    with FakeModelServer("openai", [Step(fenced(KERNELS.joinpath("syntax_error.cu").read_text()))]) as server:
        result = project.runpytest_subprocess(
            "tasks", "--ptx-model=openai-compatible:fake-model", f"--ptx-base-url={server.base_url}",
            "--ptx-turns=3", "--ptx-token-cap=150", "--ptx-trajectories=2", f"--ptx-out={out}", *SELECT,
        )  # fmt: skip
    result.assert_outcomes(failed=2, skipped=2)
    assert len(server.requests) == 1
    cap = "token cap reached (150 of 150 tokens)"
    result.stdout.fnmatch_lines(
        [
            f"gemm-n128-k2048 * m972-t2 * skipped * not tried: {cap}",
            f"ptxbench: {cap}: no model call started after it",
            f"SKIPPED [[]2[]] *: openai-compatible:fake-model: not tried: {cap}",
        ]
    )
    assert {(r["trajectory"], r["outcome"]) for r in rows(out)} == {(1, "failed"), (2, "skipped")}
    assert not (out / "trajectories" / "gemm-n128-k2048-h100-t2.json").exists()


def test_a_killed_run_resumes_without_losing_or_repeating_a_turn(project: pytest.Pytester, keys: None) -> None:
    pytest.importorskip("openai", reason="the openai SDK is not installed")
    out = project.path / "run"
    kernels = [
        fenced(KERNELS.joinpath(name).read_text())
        for name in ("syntax_error.cu", "wgmma_bf16.cu", "launcher_getenv.cu")
    ]
    script = [Step(kernels[0]), Step(kernels[1], delay=60.0), Step(kernels[1]), Step(kernels[2])]
    args = ["tasks", "--ptx-model=openai-compatible:fake-model", "--ptx-turns=3", f"--ptx-out={out}", *SELECT]
    with FakeModelServer("openai", script) as server:
        args.append(f"--ptx-base-url={server.base_url}")
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", *args], cwd=project.path, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy(),
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while len(server.requests) < 2 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)  # killed while the model writes turn 2
        process.wait()
        assert len(server.requests) == 2
        killed = trajectory(out)
        assert killed["info"]["exit_status"] == "running" and [t["turn"] for t in killed["turns"]] == [1]

        result = project.runpytest_subprocess(*args, "--ptx-resume")
    result.assert_outcomes(failed=2)  # every inspect failed: the best is the latest kernel
    record = trajectory(out)
    assert [t["turn"] for t in record["turns"]] == [1, 2, 3]
    assert judged(record)[0] == judged(killed)[0]  # turn 1 kept as it was
    assert [t[-1][:2] for t in judged(record)] == [("build", "failed"), ("inspect", "failed"), ("inspect", "failed")]
    assert len(server.requests) == 4  # 1 done + 1 killed + turns 2 and 3
    assert record["info"]["exit_status"] == "turns used" and record["info"]["model_stats"]["api_calls"] == 3


def test_each_turn_budgets_best_kernel_is_scored_on_hidden_shapes(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, keys: None
) -> None:
    """Budget 1's best kernel (turn 1, which fails inspect) differs from the final one (turn 3, which passes
    every stage that can run here and so ends the trajectory): the hidden-shape test scores both, the
    budget's row marked `budget: 1`; the report reads it."""
    pytest.importorskip("openai", reason="the openai SDK is not installed (pip install 'pytest-ptxbench[models]')")
    out = project.path / "run"
    script = [
        Step(fenced(KERNELS.joinpath("launcher_getenv.cu").read_text())),
        Step(fenced("int broken(")),
        Step(fenced(REFERENCE_GEMM)),
        Step(fenced("int broken(")),
    ]
    with FakeModelServer("openai", script) as server:
        result = project.runpytest_subprocess(
            "tasks", "--ptx-model=openai:fake-model", f"--ptx-base-url={server.base_url}", "--ptx-turns=4",
            f"--ptx-out={out}", "-k", "gemm-n128-k2048 and m70", "--ptx-shapes=hidden",
        )  # fmt: skip
    result.assert_outcomes(skipped=1)
    record = trajectory(out)
    assert len(server.requests) == 3 and record["info"]["exit_status"].startswith("passed every stage that can run")
    assert record["info"]["ptxbench"]["budgets"] == {"1": 1, "4": 3}
    final, budget = sorted(rows(out), key=lambda r: r["budget"] is not None)
    assert final["budget"] is None and final["candidate"]["sha256"] == record["turns"][2]["sha256"]
    assert budget["budget"] == 1 and budget["candidate"]["sha256"] == record["turns"][0]["sha256"]
    assert [(v["stage"], v["status"]) for v in budget["verdicts"]] == [("build", "passed"), ("inspect", "failed")]

    from pytest_ptxbench.report.runs import load_run
    from pytest_ptxbench.report.scores import score_runs

    [scored] = score_runs([load_run(out)])
    assert scored.budgets[1].hidden is not None and scored.budgets[4].hidden is not None
    assert len(scored.shapes) == 1  # the budget row is not a shape test of its own
