"""build and inspect with the real nvcc and cuobjdump: no mocked compiler or disassembler."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from pytest_ptxbench import allowlist
from pytest_ptxbench.toolchain import find_tool
from pytest_ptxbench.verdict import Status

from .conftest import (
    DESCRIPTORS_CACHED_ON_M,
    KERNELS,
    ON_ANOTHER_STREAM,
    PLAIN_SM90,
    PLANTED,
    REFERENCE_GEMM,
    TASKS,
    BuildAndInspect,
    planted_variant,
)


def test_reference_h100_gemm_passes_build_and_inspect(build_and_inspect: BuildAndInspect) -> None:
    built, inspected = build_and_inspect(TASKS / "reference/h100/gemm.cu", "h100")
    assert built.status is Status.PASSED, built.message
    assert inspected is not None and inspected.status is Status.PASSED, inspected and inspected.message
    mnemonics = [m for holders in inspected.data["found"].values() for ms in holders.values() for m in ms]
    assert any(m.startswith("HGMMA.") and m.endswith(".F32.BF16") for m in mnemonics)
    assert any(m.startswith("UTMALDG") for m in mnemonics)
    assert "HGMMA" in inspected.data["summary"] and " in " in inspected.data["summary"]


@pytest.mark.parametrize(
    ("edits", "left"),
    [
        (
            ON_ANOTHER_STREAM,
            r",\s*stream>>>|\.stream\s*=\s*stream;|Async\([^;]*\bstream\)",
        ),  # work on the task's stream
        (DESCRIPTORS_CACHED_ON_M, r"^\s*CUtensorMap\s+\w+\s*,"),  # descriptors encoded afresh on every call
    ],
    ids=["stream", "descriptors"],
)
def test_the_gpu_suites_planted_gemm_variants_reach_every_path(
    build_and_inspect: BuildAndInspect, tmp_path: Path, edits: dict[str, str], left: str
) -> None:
    """The GPU suite plants these variants at a shape whose path CI cannot run: what each cheat changes must
    be gone from every path of the reference, or a new path would turn the planted cheat into an honest
    kernel there (as the BN = 128 kernel once did). The variants still build and pass inspect."""
    assert re.search(left, REFERENCE_GEMM, re.M)
    variant = planted_variant(edits)
    assert not re.search(left, variant, re.M), "a path of the reference escaped the planted edit"
    source = tmp_path / "variant.cu"
    source.write_text(variant)
    built, inspected = build_and_inspect(source, "h100")
    assert built.status is Status.PASSED, built.message
    assert inspected is not None and inspected.status is Status.PASSED, inspected and inspected.message


def test_reference_b200_gemm_shows_utchmma(build_and_inspect: BuildAndInspect) -> None:
    built, inspected = build_and_inspect(TASKS / "reference/b200/gemm.cu", "b200")
    assert built.status is Status.PASSED, built.message
    assert inspected is not None and inspected.status is Status.PASSED, inspected and inspected.message
    assert inspected.data["found"]["UTCHMMA"], inspected.data
    assert "UTCHMMA" in inspected.message


def test_wgmma_bf16_passes_for_sm90a(build_and_inspect: BuildAndInspect) -> None:
    built, inspected = build_and_inspect(KERNELS / "wgmma_bf16.cu", "h100", required=("HGMMA.*.F32.BF16",))
    assert built.passed, built.message
    assert inspected is not None and inspected.passed, inspected and inspected.message
    assert inspected.data["found"]["HGMMA.*.F32.BF16"] == {"wgmma_kernel": ["HGMMA.64x8x16.F32.BF16"]}


def test_guarded_wgmma_builds_for_plain_sm90_and_fails_inspect(build_and_inspect: BuildAndInspect) -> None:
    built, inspected = build_and_inspect(KERNELS / "wgmma_guarded.cu", PLAIN_SM90, required=("HGMMA.*.F32.BF16",))
    assert built.passed, built.message
    assert inspected is not None and inspected.status is Status.FAILED
    assert "missing HGMMA.*.F32.BF16" in inspected.message


def test_unguarded_wgmma_fails_the_plain_sm90_build_with_the_compilers_message(
    build_and_inspect: BuildAndInspect,
) -> None:
    built, inspected = build_and_inspect(KERNELS / "wgmma_bf16.cu", PLAIN_SM90)
    assert built.status is Status.FAILED and inspected is None
    assert "not supported on .target 'sm_90'" in built.message


def test_fp16_wgmma_fails_a_bf16_modifier_match(build_and_inspect: BuildAndInspect) -> None:
    built, inspected = build_and_inspect(KERNELS / "wgmma_fp16.cu", "h100", required=("HGMMA.*.F32.BF16",))
    assert built.passed, built.message
    assert inspected is not None and inspected.status is Status.FAILED
    assert "missing HGMMA.*.F32.BF16 (found HGMMA.64x8x16.F32" in inspected.message


def test_kernels_named_like_the_required_opcodes_fail_inspect(build_and_inspect: BuildAndInspect) -> None:
    built, inspected = build_and_inspect(PLANTED / "named_like_its_opcodes.cu")
    assert built.passed, built.message
    assert inspected is not None and inspected.status is Status.FAILED
    assert inspected.message == "missing HGMMA.*.F32.BF16; missing UTMALDG"
    assert inspected.data["found"] == {}
    assert sorted(inspected.data["kernels"].values()) == [
        "HGMMA_64x256x16_F32_BF16_UTMALDG",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_cublas",
    ]


def test_missing_required_opcode_is_named(build_and_inspect: BuildAndInspect) -> None:
    _, inspected = build_and_inspect(KERNELS / "wgmma_bf16.cu", "h100", required=("HGMMA.*.F32.BF16", "UTMALDG"))
    assert inspected is not None and inspected.status is Status.FAILED
    assert inspected.message == "missing UTMALDG"


def test_dlopen_fails_the_allow_list(build_and_inspect: BuildAndInspect) -> None:
    _, inspected = build_and_inspect(KERNELS / "launcher_dlopen.cu", required=())
    assert inspected is not None and inspected.status is Status.FAILED
    assert {"dlopen", "dlsym"} <= set(inspected.data["forbidden_imports"]), inspected.message


def test_getenv_fails_the_allow_list(build_and_inspect: BuildAndInspect) -> None:
    _, inspected = build_and_inspect(KERNELS / "launcher_getenv.cu", required=())
    assert inspected is not None and inspected.status is Status.FAILED
    assert inspected.data["forbidden_imports"] == ["getenv"]


def test_device_allocation_fails_the_allow_list(build_and_inspect: BuildAndInspect) -> None:
    _, inspected = build_and_inspect(KERNELS / "launcher_malloc.cu", required=())
    assert inspected is not None and inspected.data["forbidden_imports"] == ["cudaMalloc"]


def test_raw_syscall_in_host_code_fails_inspect(build_and_inspect: BuildAndInspect) -> None:
    _, inspected = build_and_inspect(KERNELS / "launcher_syscall.cu", required=())
    assert inspected is not None and inspected.status is Status.FAILED
    assert "raw system-call instructions in host code: syscall in ptxbench_gemm" in inspected.message


def test_a_clean_launcher_passes_the_host_checks(build_and_inspect: BuildAndInspect) -> None:
    _, inspected = build_and_inspect(KERNELS / "wgmma_bf16.cu", required=())
    assert inspected is not None and inspected.passed, inspected.message
    assert inspected.data["forbidden_imports"] == [] and inspected.data["forbidden_libraries"] == []


def test_wrong_launcher_signature_does_not_compile(build_and_inspect: BuildAndInspect) -> None:
    built, _ = build_and_inspect(KERNELS / "wrong_signature.cu")
    assert built.status is Status.FAILED
    assert "ptxbench_gemm" in built.message and "nvcc exited" in built.message


def test_missing_launcher_fails_inspect(build_and_inspect: BuildAndInspect) -> None:
    built, inspected = build_and_inspect(KERNELS / "no_launcher.cu", required=())
    assert built.passed, built.message
    assert inspected is not None and "launcher ptxbench_gemm is not defined" in inspected.message


def test_compile_error_is_a_failed_verdict_with_the_log(build_and_inspect: BuildAndInspect) -> None:
    built, _ = build_and_inspect(KERNELS / "syntax_error.cu")
    assert built.status is Status.FAILED
    assert 'expected a ";"' in built.message
    assert "nvcc" in Path(built.data["log"]).read_text()


def test_build_has_a_timeout(build_and_inspect: BuildAndInspect) -> None:
    built, _ = build_and_inspect(TASKS / "reference/h100/gemm.cu", timeout=0.05)
    assert built.status is Status.FAILED
    assert built.message == "nvcc did not finish within 0 s"


def test_build_keeps_ptxas_resources(build_and_inspect: BuildAndInspect) -> None:
    built, _ = build_and_inspect(KERNELS / "wgmma_bf16.cu", required=())
    resources = built.data["resources"]
    assert list(resources) == ["_Z12wgmma_kernelP13__nv_bfloat16mmi"]
    assert resources["_Z12wgmma_kernelP13__nv_bfloat16mmi"]["registers"] > 0


@pytest.mark.parametrize(
    ("planted", "forbidden"),
    [
        ("host_background_thread.cu", "_ZNSt6thread15_M_start_thread"),
        ("host_own_stream.cu", "cudaStreamCreateWithFlags"),
        ("host_graph_replay.cu", "cudaGraphLaunch"),
        ("host_persisting_l2.cu", "cudaStreamSetAttribute"),
        ("host_persisting_l2.cu", "cudaDeviceSetLimit"),
        ("host_patches_memory.cu", "mprotect"),
        ("host_spawns_process.cu", "execve"),
        ("host_reads_api_key.cu", "getenv"),
        ("host_opens_socket.cu", "connect"),
        ("host_writes_checkout.cu", "fopen"),
        ("lazy_host_callback.cu", "cudaLaunchHostFunc"),
        ("forges_replies.cu", "write"),
        ("host_reads_reference.cu", "fopen"),
        ("host_reads_reference.cu", "fread"),
        ("rewrites_the_clock.cu", "dlsym"),
        ("helper_thread_finishes.cu", "pthread_create"),
        ("writes_into_checkout.cu", "fopen"),
    ],
)
def test_planted_host_cheats_fail_the_allow_list(
    build_and_inspect: BuildAndInspect, planted: str, forbidden: str
) -> None:
    built, inspected = build_and_inspect(PLANTED / planted, required=())
    assert built.passed, built.message
    assert inspected is not None and inspected.status is Status.FAILED
    assert any(name.startswith(forbidden) for name in inspected.data["forbidden_imports"]), inspected.message
    assert "host code imports symbols outside the allow-list: " in inspected.message


def test_a_library_defining_the_timing_apis_fails_inspect(build_and_inspect: BuildAndInspect) -> None:
    built, inspected = build_and_inspect(PLANTED / "shadows_timer_apis.cu", required=())
    assert built.passed, built.message
    assert inspected is not None and inspected.status is Status.FAILED
    shadows = ["clock_gettime", "cudaEventElapsedTime", "cudaEventRecord", "cuptiActivityEnable"]
    assert inspected.data["forbidden_definitions"] == shadows
    assert inspected.data["forbidden_imports"] == []
    assert inspected.message.startswith(
        f"host code defines symbols that could shadow library APIs: {', '.join(shadows)}"
    )


def test_what_a_library_may_define() -> None:
    defined = [
        ("ptxbench_gemm", True),
        ("_init", True),
        ("_Z9saturated13__nv_bfloat16", True),  # C++ names: the candidate's own
        ("host_counter", False),  # a plain host global
        ("helper", True),  # a second C-linkage function
        ("cudaStreamHandle", False),  # any symbol in an API's namespace
        ("__cudaRegisterLinkedBinary_x", True),
        ("cuGetProcAddress", True),
        ("nvtxRangePushA", True),
    ]
    assert allowlist.forbidden_definitions(defined, "ptxbench_gemm") == [
        "__cudaRegisterLinkedBinary_x",
        "cuGetProcAddress",
        "cudaStreamHandle",
        "helper",
        "nvtxRangePushA",
    ]


# Every planted kernel tests/test_gpu.py judges on the H200: each must pass build and inspect, or that test
# fails before the stage it is about (as writes_zeros.cu once did, with no kernel for inspect to find).
# The relaxed ones are refused here on purpose (their allow-list rows above); their GPU tests set inspect's
# refusal aside to show the next line of defence. Names of reference kernels (tasks/reference/h100) are not planted.
RELAXED = {"writes_into_checkout.cu", "rewrites_the_clock.cu", "helper_thread_finishes.cu"}
GPU_PLANTED = sorted(
    name
    for name in set(re.findall(r'"([a-z_]+\.cu)"', (Path(__file__).parent / "test_gpu.py").read_text())) - RELAXED
    if not (TASKS / "reference" / "h100" / name).exists()
)
assert GPU_PLANTED, "no planted kernel named in tests/test_gpu.py: the pattern above no longer matches"


@pytest.mark.parametrize("planted", GPU_PLANTED)
def test_planted_kernels_of_the_gpu_tests_pass_the_static_stages(
    build_and_inspect: BuildAndInspect, planted: str
) -> None:
    required = None if "wgmma" in planted else ()  # the wgmma ones are caught at profile, after inspect
    built, inspected = build_and_inspect(PLANTED / planted, required=required)
    assert built.passed, built.message
    assert inspected is not None and inspected.passed, inspected.message


def test_device_code_planted_in_host_code_fails_inspect(build_and_inspect: BuildAndInspect, tmp_path: Path) -> None:
    """A fatbin that host-side inline assembly puts into the library (standing in for a vendor kernel copied in)
    is extracted by cuobjdump like the candidate's own device code. Only the cubin nvcc compiled from the source
    is the candidate's: the planted kernel is neither inspected nor ever loaded, and inspect fails the library."""
    nvcc = find_tool("nvcc")
    assert nvcc is not None
    foreign = tmp_path / "foreign.cu"
    foreign.write_text('extern "C" __global__ void nvjet_sm90_planted(float* x) { x[threadIdx.x] = 1.0f; }\n')
    fatbin = tmp_path / "foreign.fatbin"
    made = subprocess.run(
        [str(nvcc.path), "-fatbin", "-gencode", "arch=compute_90a,code=sm_90a", str(foreign), "-o", str(fatbin)],
        capture_output=True,
        text=True,
        env=nvcc.env(),
    )
    assert made.returncode == 0, made.stderr
    data = ",".join(f"0x{b:02x}" for b in fatbin.read_bytes())
    planted = tmp_path / "planted.cu"
    planted.write_text(
        (TASKS / "reference/h100/gemm.cu").read_text()
        + f'\n#ifndef __CUDA_ARCH__\nasm(".section .nv_fatbin, \\"a\\"\\n.align 8\\n.byte {data}\\n.text\\n");\n#endif\n'
    )
    built, inspected = build_and_inspect(planted, "h100")
    assert built.passed, built.message
    assert [Path(c["path"]).name for c in built.data["cubins"]] == ["candidate.sm_90a.cubin"]
    assert inspected is not None and inspected.status is Status.FAILED
    assert inspected.message == (
        "the library embeds 1 sm_90a cubin(s) besides the one nvcc compiled from candidate.cu (device code planted"
        " in host code is never the candidate's)"
    )
    assert "nvjet_sm90_planted" not in inspected.data["kernels"]
