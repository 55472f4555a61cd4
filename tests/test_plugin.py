"""The plugin as a user drives it, through pytester in subprocesses (a clean environment per run)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import GEMM_SKIP_REASON, KERNELS, results

COUNTS = {
    "gemm": 17 * 12,
    "attention_fwd": 8 * 6,
    "attention_bwd": 6 * 5,
    "gqa_paged_decode": 4 * 7,
    "gqa_paged_prefill": 8 * 6,
}


def _ids(result: pytest.RunResult) -> list[str]:
    return [line.split("[", 1)[1].rstrip("]") for line in result.outlines if line.startswith("tasks/test_tasks.py::")]


def test_collect_lists_every_family_with_readable_ids(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("tasks", "--collect-only", "-q")
    ids = _ids(result)
    assert len(ids) == sum(COUNTS.values())
    assert "gemm-n7168-k5120-h100-m8192" in ids
    assert "attention_fwd-d128-causal-h100-b4-h48-s4096" in ids
    assert "attention_bwd-d64-full-h100-b4-h48-s1000" in ids
    assert ids.index("gemm-n7168-k5120-h100-m8192") < ids.index("gemm-n7168-k5120-h100-m70")  # catalogue order
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize(
    ("args", "family", "count"),
    [
        (("-k", "attention_bwd"), "attention_bwd", COUNTS["attention_bwd"]),
        (("-k", "gemm"), "gemm", COUNTS["gemm"]),
        (("-m", "attention_fwd and not hidden"), "attention_fwd", 8 * 2),
        (("-m", "gemm and b200", "--ptx-gpu=all"), "gemm", COUNTS["gemm"]),
        (("-k", "gemm-n7168-k5120 and h100", "--ptx-shapes=visible"), "gemm", 2),
    ],
)
def test_selection(project: pytest.Pytester, args: tuple[str, ...], family: str, count: int) -> None:
    ids = _ids(project.runpytest_subprocess("tasks", "--collect-only", "-q", *args))
    assert len(ids) == count
    assert all(i.startswith(f"{family}-") for i in ids)


def test_targets_and_trajectories_in_ids(project: pytest.Pytester) -> None:
    ids = _ids(
        project.runpytest_subprocess(
            "tasks",
            "--collect-only",
            "-q",
            "--ptx-gpu=all",
            "--ptx-trajectories=2",
            "-k",
            "gemm-n128-k2048",
            "--ptx-shapes=visible",
        )
    )
    assert sorted(ids) == sorted(
        f"gemm-n128-k2048-{t}-{m}-t{n}" for t in ("h100", "b200") for m in ("m8192", "m972") for n in (1, 2)
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--ptx-lang=triton",), ["gemm-n128-k2048-h100-triton-m8192", "gemm-n128-k2048-h100-triton-m972"]),
        (
            ("--ptx-lang=all", "-k", "triton"),
            ["gemm-n128-k2048-h100-triton-m8192", "gemm-n128-k2048-h100-triton-m972"],
        ),
        (("--ptx-lang=all", "-m", "cuda"), ["gemm-n128-k2048-h100-m8192", "gemm-n128-k2048-h100-m972"]),
        (("--ptx-lang=all", "-m", "triton or cuda"), None),
    ],
    ids=["triton", "all-k-triton", "all-m-cuda", "all"],
)
def test_the_language_is_an_axis(project: pytest.Pytester, args: tuple[str, ...], expected: list[str] | None) -> None:
    """CUDA ids stay as they were; Triton's name the language after the target, so -k and -m select it."""
    ids = _ids(project.runpytest_subprocess("tasks", "--collect-only", "-q", "--ptx-shapes=visible", *args))
    ids = [i for i in ids if i.startswith("gemm-n128-k2048-")]
    if expected is None:  # both languages, each once
        assert sorted(ids) == sorted(
            f"gemm-n128-k2048-h100{lang}-{m}" for lang in ("", "-triton") for m in ("m8192", "m972")
        )
    else:
        assert sorted(ids) == expected


def test_an_unknown_language_is_refused_by_name(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("tasks", "--collect-only", "-q", "--ptx-lang=rust")
    assert result.ret != 0
    assert "rust" in result.stderr.str() and "triton" in result.stderr.str()


def test_slow_marker_follows_flops(project: pytest.Pytester) -> None:
    ids = _ids(project.runpytest_subprocess("tasks", "--collect-only", "-q", "-m", "slow"))
    # at least 4 TFLOP: attention backward d128 at B4 S4096 (4.1) and B1 S8192 (4.1); the largest GEMM is 3.2
    assert sorted(ids) == ["attention_bwd-d128-full-h100-b1-h48-s8192", "attention_bwd-d128-full-h100-b4-h48-s4096"]


def test_malformed_task_file_stops_collection(project: pytest.Pytester) -> None:
    path = project.path / "tasks" / "gemm.yaml"
    path.write_text(path.read_text().replace("{N: 256, K: 7168}", "{N: -256, K: 7168}"))
    result = project.runpytest_subprocess("tasks", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["bad task file: *tasks/gemm.yaml: tasks[[]7[]].N: must be positive, got -256"])


def test_unknown_model_stops_collection(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("tasks", "--collect-only", "--ptx-model=ollama")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["--ptx-model=ollama: unknown model (known: reference, file:<dir>, replay:<run dir>, *)"]
    )


def test_the_triton_reference_is_built_and_inspected_per_task(project: pytest.Pytester) -> None:
    """`--ptx-lang=triton`: the reference `.py` compiled by Triton for sm_90a on a CPU machine, inspected by the
    CUDA rules, once per task (Triton specialises on the task's N and K); the GPU stages skip for want of a GPU."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[toolchain]')")
    out = project.path / "run"
    result = project.runpytest_subprocess(
        "tasks", "--ptx-lang=triton", "-k", "gemm-n7168-k5120 or gemm-n128-k2048", "--ptx-shapes=visible",
        f"--ptx-out={out}", "-rs",
    )  # fmt: skip
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(["*passed: build, inspect (HGMMA.*.F32.BF16, UTMALDG.2D* in gemm_kernel*"])
    rows = results(out)
    assert sorted(r["id"] for r in rows) == sorted(
        f"gemm-{t}-h100-triton-{m}" for t in ("n7168-k5120", "n128-k2048") for m in ("m8192", "m972")
    )
    assert {r["lang"] for r in rows} == {"triton"}
    assert all("needs an sm_90 device (H100-class)" in r["reason"] for r in rows)
    builds = sorted(p.name.rsplit("-", 1)[0] for p in (out / "builds").iterdir())  # less the source's digest
    assert builds == ["gemm-n128-k2048-h100", "gemm-n7168-k5120-h100"]  # one build per task


def test_reference_gemm_without_gpu_is_skipped_with_what_passed(project: pytest.Pytester) -> None:
    out = project.path / "run"
    result = project.runpytest_subprocess(
        "tasks", "-k", "gemm-n7168-k5120 or gemm-n128-k2048", "--ptx-shapes=visible", f"--ptx-out={out}", "-rs"
    )
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(
        [
            "ptxbench: model=reference target=h100 lang=cuda shapes=visible seed=0 out=*",
            "ptxbench devices: none",
            "ptxbench tools: nvcc *, cuobjdump *",
            "*= ptxbench =*",
            "task * target * shape * build * inspect * check * profile * sanitize * time * latency * baseline * speedup * outcome * reason",
            "gemm-n128-k2048 * h100 * m8192 * ok * ok * - * - * - * - * - * - * skipped * check: needs an sm_90 device*",
            f"SKIPPED [[]4[]] *: {GEMM_SKIP_REASON}",
        ]
    )
    builds = list((out / "builds").iterdir())
    assert len(builds) == 1, builds  # one kernel serves every gemm task: built and inspected once
    assert {p.name for p in builds[0].iterdir()} >= {
        "candidate.cu",
        "candidate.so",
        "build.log",
        "sass.txt",
        "inventory.json",
    }
    rows = results(out)
    assert sorted(r["id"] for r in rows) == sorted(
        f"gemm-{t}-h100-{m}" for t in ("n7168-k5120", "n128-k2048") for m in ("m8192", "m972")
    )
    assert all(r["outcome"] == "skipped" and r["reason"] == GEMM_SKIP_REASON for r in rows)
    assert [v["stage"] for v in rows[0]["verdicts"]] == ["build", "inspect", "check", "profile", "sanitize", "time"]
    environment = json.loads((out / "environment.json").read_text())
    assert environment["format"] == "ptxbench-run/2" and environment["settings"]["model"] == "reference"
    assert len(environment["task_set"]) == 16 and environment["tools"]["nvcc"]["version"]
    assert environment["flashinfer_cache"].endswith("/.cache/flashinfer")  # where its compiled kernels stay


def test_the_summary_table_sorts_shapes_by_number_gives_reasons_and_the_run_directory(
    project: pytest.Pytester,
) -> None:
    out = project.path / "run"
    mine = project.path / "mine"
    mine.mkdir()
    (mine / "gemm.cu").write_text((KERNELS / "syntax_error.cu").read_text())
    result = project.runpytest_subprocess(
        "tasks", "-k", "gemm-n128-k2048 or attention_bwd-d64-full", f"--ptx-out={out}", f"--ptx-model=file:{mine}"
    )
    result.assert_outcomes(failed=12, skipped=5)
    start = next(i for i, line in enumerate(result.outlines) if "= ptxbench =" in line)
    end = next(i for i, line in enumerate(result.outlines) if i > start and line.startswith("="))
    table = result.outlines[start:end]  # the ptxbench section
    shapes = [line.split()[3] for line in table[2:] if line.startswith(("gemm", "attention_bwd"))]
    assert shapes == [
        *("b1-h48-s8192", "b2-h48-s3001", "b4-h48-s1000", "b4-h48-s2048", "b4-h48-s4096"),
        *("m70", "m93", "m232", "m289", "m492", "m901", "m952", "m969", "m972", "m2379", "m8192", "m8828"),
    ]
    result.stdout.fnmatch_lines(
        [
            "attention_bwd-d64-full * b1-h48-s8192 * - * - * - * - * - * - * * skipped * has no kernel for *",
            '* m70 * FAIL * - * - * - * - * - * * failed * build: nvcc exited 2: candidate.cu(6): error: expected a ";" *',
        ]
    )
    assert table[-1] == f"ptxbench run directory: {out}"
    reasons = [re.split(r"\s{2,}", line)[-1] for line in table[2:-1]]
    assert max(len(r) for r in reasons) == 80 and all(r.endswith("...") for r in reasons)  # cut short


def test_require_gpu_turns_the_skip_into_a_failure(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("tasks", "-k", "gemm-n128-k2048", "--ptx-shapes=visible", "--ptx-require-gpu")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([f"*{GEMM_SKIP_REASON}*"])


def test_marker_overrides_the_command_line(project: pytest.Pytester) -> None:
    (project.path / "tasks" / "test_marked.py").write_text(
        "import pytest\n\n@pytest.mark.ptxbench(require_gpu=True)\n"
        "def test_marked(ptx_case, ptx_bench):\n    ptx_bench.evaluate(ptx_case)\n"
    )
    result = project.runpytest_subprocess("tasks/test_marked.py", "-k", "gemm-n128-k2048", "--ptx-shapes=visible")
    result.assert_outcomes(failed=2)


@pytest.mark.parametrize(
    ("task", "found"),
    [
        ("gemm-n7168-k5120", "UTCHMMA, UTMALDG.2D in gemm_tcgen05_kernel<*>"),
        ("attention_fwd-d128-causal", "UTCHMMA, UTMALDG.3D in attention_fwd_tcgen05_kernel<*>"),
        ("attention_bwd-d96-full", "UTCHMMA, UTMALDG.3D in attention_bwd_tcgen05_kernel<*>"),
    ],
)
def test_b200_target_reports_utchmma_and_not_run_on_hardware(project: pytest.Pytester, task: str, found: str) -> None:
    result = project.runpytest_subprocess("tasks", "-k", task, "--ptx-shapes=visible", "--ptx-gpu=b200", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(
        [
            f"SKIPPED [[]2[]] *: passed: build, inspect (*{found}*); "
            "needs an sm_100 device (B200-class), found none; the b200 reference kernel is not run on hardware",
        ]
    )


def test_file_model_evaluates_the_users_kernels(project: pytest.Pytester) -> None:
    mine = project.path / "mine"
    mine.mkdir()
    (mine / "gemm-n128-k2048.cu").write_text((KERNELS / "syntax_error.cu").read_text())
    (mine / "gemm.cu").write_text((KERNELS / "launcher_getenv.cu").read_text())
    result = project.runpytest_subprocess(
        "tasks",
        "-k",
        "gemm-n128-k2048 or gemm-n256-k7168 or attention_fwd-d64-full",
        "--ptx-shapes=visible",
        f"--ptx-model=file:{mine}",
        "-rs",
    )
    result.assert_outcomes(failed=4, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*test_task?gemm-n128-k2048-h100-m8192?*",
            "build failed: nvcc exited 2:",
            'candidate.cu(6): error: expected a ";"',
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*test_task?gemm-n256-k7168-h100-m8192?*",
            "inspect failed: missing HGMMA.*.F32.BF16; missing UTMALDG; host code imports symbols outside the allow-list: getenv",
        ]
    )
    result.stdout.fnmatch_lines(["SKIPPED [[]2[]] *: file:* has no kernel for attention_fwd-d64-full on h100 *"])
    assert [p.name.split("-", 2)[2] for p in (project.path / "runs").iterdir()] == ["file-mine"]


def test_file_model_needs_a_folder(project: pytest.Pytester) -> None:
    result = project.runpytest_subprocess("tasks", "--ptx-model=file:/no/such/folder", "-k", "gemm-n128-k2048")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["--ptx-model=file:/no/such/folder: /no/such/folder is not a folder"])


def test_importing_the_package_starts_nothing() -> None:
    code = (
        "import sys, pytest_ptxbench.plugin, pytest_ptxbench.session; "
        "assert not {'torch', 'cuda', 'cupy', 'flashinfer', 'openai', 'anthropic', 'google.genai'} & set(sys.modules), "
        "sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
