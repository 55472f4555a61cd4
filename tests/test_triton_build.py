"""The static half of a Triton candidate on CPU: the real Triton compiles it for an explicit target, no GPU, and
the real cuobjdump reads the cubins; nothing of Triton or cuobjdump is mocked."""

from __future__ import annotations

import hashlib
import importlib.util
import math
from pathlib import Path

import pytest

from pytest_ptxbench.sandbox import make_sandbox
from pytest_ptxbench.stages.inspect import inspect_cubins
from pytest_ptxbench.stages.triton_build import build_triton
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import Family, Task
from pytest_ptxbench.verdict import Status, Verdict

from .conftest import PLANTED, ROOT, TASKS

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="triton is not importable here (pip install triton)"
)

REFERENCE = (TASKS / "reference" / "h100" / "gemm.py").read_text()
WITHOUT_DESCRIPTORS = (PLANTED / "triton_gemm_without_descriptors.py").read_text()
H100, B200 = TARGETS["h100"], TARGETS["b200"]
TILE_LINE = "    block_n = 256 if N >= 256 else 128\n"
ZERO_KERNEL = """\
import triton
import triton.language as tl


@triton.jit
def zero_kernel(c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(c_ptr + offs, tl.zeros((BLOCK,), tl.bfloat16), mask=offs < n)
"""


@pytest.fixture(scope="module")
def task(gemm: Family) -> Task:
    return next(t for t in gemm.tasks if t.name == "gemm-n7168-k5120")


def _build(gemm: Family, task: Task, source: str, folder: Path, target: str = "h100", timeout: float = 300) -> Verdict:
    return build_triton(source, gemm, task, TARGETS[target], folder, timeout)


def _line(source: str, text: str) -> int:
    return source.splitlines().index(text.rstrip("\n")) + 1


def test_reference_gemm_builds_for_h100_and_passes_inspect(gemm: Family, task: Task, tmp_path: Path) -> None:
    built = _build(gemm, task, REFERENCE, tmp_path)
    assert built.passed, built.message
    assert built.data["kernels"] == {"gemm_kernel": "gemm_kernel"}
    assert built.data["cubins"] and all(c["path"].endswith(".sm_90a.cubin") for c in built.data["cubins"])
    # every shape of the family and the sanitizer shape were compiled, with the grid each launches
    assert set(built.data["launches"]) == {s.id for s in gemm.shapes("all")} | {"sanitizer"}
    [launch] = built.data["launches"]["m8192"]
    assert launch["grid"] == [math.ceil(8192 / 128) * math.ceil(7168 / 256)] and launch["num_warps"] == 8
    assert (tmp_path / "triton-cache").is_dir() and (tmp_path / "home").is_dir()

    inspected = inspect_cubins(built.data["cubins"], H100, gemm.opcodes["h100"], timeout=120)
    assert inspected.passed, inspected.message
    assert set(inspected.data["found"]) == {"HGMMA.*.F32.BF16", "UTMALDG"}
    assert inspected.data["found"]["UTMALDG"] == {"gemm_kernel": ["UTMALDG.2D"]}
    assert inspected.message.startswith("HGMMA.64x256x16.F32.BF16, ") and " in gemm_kernel" in inspected.message
    assert inspected.data["cubins"] == built.data["cubins"] and inspected.data["kernels"] == built.data["kernels"]


def test_gemm_without_descriptors_fails_inspect_for_missing_utmaldg(gemm: Family, task: Task, tmp_path: Path) -> None:
    built = _build(gemm, task, WITHOUT_DESCRIPTORS, tmp_path)
    assert built.passed, built.message
    inspected = inspect_cubins(built.data["cubins"], H100, gemm.opcodes["h100"], timeout=120)
    assert inspected.status is Status.FAILED
    assert inspected.message == "missing UTMALDG"
    assert inspected.data["found"] == {"HGMMA.*.F32.BF16": {"gemm_kernel": ["HGMMA.64x128x16.F32.BF16"]}}


def test_reference_gemm_builds_for_b200_as_sm100a(gemm: Family, task: Task, tmp_path: Path) -> None:
    built = _build(gemm, task, REFERENCE, tmp_path, target="b200")
    assert built.passed, built.message
    assert all(c["path"].endswith(".sm_100a.cubin") for c in built.data["cubins"])
    inspected = inspect_cubins(built.data["cubins"], B200, gemm.opcodes["b200"], timeout=120)
    assert inspected.passed, inspected.message
    assert set(inspected.data["found"]) == {"UTCHMMA", "UTMALDG"}
    # the architecture comes from the cubins themselves: sm_100a code is no sm_90a kernel
    elsewhere = inspect_cubins(built.data["cubins"], H100, (), timeout=120)
    assert elsewhere.status is Status.FAILED and elsewhere.message == "no sm_90a kernel in the cubins"


def test_a_cubin_changed_after_the_build_fails_inspect(gemm: Family, task: Task, tmp_path: Path) -> None:
    built = _build(gemm, task, REFERENCE, tmp_path)
    assert built.passed, built.message
    cubins = [{**c, "sha256": "0" * 64} for c in built.data["cubins"]]
    inspected = inspect_cubins(cubins, H100, gemm.opcodes["h100"], timeout=120)
    assert inspected.status is Status.FAILED and "is no longer the cubin the build wrote" in inspected.message


def test_a_cubin_the_candidates_python_wrote_is_never_kept(gemm: Family, task: Task, tmp_path: Path) -> None:
    """The compile child runs the candidate's Python, which can overwrite the cubin Triton wrote: harness code
    compiles every cubin again from its recorded IR and puts that one in its place, in `cubins/` and in the
    Triton cache the capture child loads from. The planted kernel is gone."""
    built = _build(gemm, task, (PLANTED / "triton_plants_a_cubin.py").read_text(), tmp_path)
    assert built.passed, built.message
    (cubin,) = built.data["cubins"]
    inspected = inspect_cubins(built.data["cubins"], H100, (), timeout=120)
    assert set(inspected.data["kernels"]) == {"clear_kernel"}  # other_kernel's code was written over it
    cached = [p.read_bytes() for p in (tmp_path / "triton-cache").rglob("clear_kernel.cubin")]
    assert cached and all(hashlib.sha256(b).hexdigest() == cubin["sha256"] for b in cached)


def test_links_the_compile_child_leaves_are_never_written_through(gemm: Family, task: Task, tmp_path: Path) -> None:
    """Harness code puts the recompiled cubins in the build's Triton cache, which the compile child (the
    candidate's Python) could fill with links: one to a file outside the build folder is left alone, even with
    no sandbox to stop the write."""
    victim = tmp_path / "victim.txt"
    victim.write_text("not a cubin")
    source = ZERO_KERNEL + (
        "\n\nimport os, sys\nfrom pathlib import Path\n\n"
        "def run(A, B, C, M, N, K, workspace):\n"
        "    zero_kernel[(triton.cdiv(M * N, 1024),)](C, M * N, BLOCK=1024)\n"
        "    victim = Path(sys.argv[1]).parent.parent / 'victim.txt'\n"
        "    for cached in Path(os.environ['TRITON_CACHE_DIR']).rglob('zero_kernel.cubin'):\n"
        "        cached.unlink()\n"
        "        cached.symlink_to(victim)\n"
    )
    built = build_triton(source, gemm, task, H100, tmp_path / "build", 300, sandbox="off")
    assert built.passed, built.message
    assert victim.read_text() == "not a cubin"


def test_ir_override_fails_the_build(gemm: Family, task: Task, tmp_path: Path) -> None:
    """`ir_override` makes Triton take a file as a stage's output instead of compiling: refused, even when the
    file holds what Triton itself made."""
    source = ZERO_KERNEL + (
        "\n\ndef run(A, B, C, M, N, K, workspace):\n"
        "    made = zero_kernel.warmup(C, M * N, BLOCK=1024, grid=(1,))\n"
        "    with open('zero.ptx', 'w') as f:\n"
        "        f.write(made.asm['ptx'])\n"
        "    zero_kernel[(triton.cdiv(M * N, 1024),)](C, M * N, BLOCK=1024, ir_override='zero.ptx')\n"
    )
    built = _build(gemm, task, source, tmp_path)
    assert built.status is Status.FAILED
    assert "it sets ir_override: Triton would take a file instead of compiling" in built.message, built.message


def test_a_syntax_error_fails_the_build_naming_its_line(gemm: Family, task: Task, tmp_path: Path) -> None:
    source = REFERENCE.replace(TILE_LINE, TILE_LINE.replace("128\n", "128)\n"))
    built = _build(gemm, task, source, tmp_path)
    assert built.status is Status.FAILED
    assert built.message.startswith("loading candidate.py failed:")
    assert f'File "candidate.py", line {_line(REFERENCE, TILE_LINE)}' in built.message
    assert "SyntaxError: unmatched ')'" in built.message
    assert str(tmp_path) not in built.message


def test_an_exception_in_run_fails_the_build_with_its_line_and_shapes(gemm: Family, task: Task, tmp_path: Path) -> None:
    guard = "    assert M % BLOCK_M == 0, 'whole tiles only'\n"
    source = REFERENCE.replace(TILE_LINE, TILE_LINE + guard)
    built = _build(gemm, task, source, tmp_path)
    assert built.status is Status.FAILED
    # m8192 is whole tiles; m972 is the first shape that is not, and 11 more (the sanitizer's m200 among them)
    assert built.message.startswith("run failed at m972 (and 11 other shapes):\n")
    assert f'File "candidate.py", line {_line(source, guard)}, in run' in built.message
    assert built.message.endswith("AssertionError: whole tiles only")
    assert "triton_compile" not in built.message  # the harness's own frames are cut


def test_a_kernel_that_does_not_compile_fails_the_build_with_tritons_message(
    gemm: Family, task: Task, tmp_path: Path
) -> None:
    built = _build(gemm, task, REFERENCE.replace("tl.dot(a, b.T, acc)", "tl.dot(a, b, acc)"), tmp_path)
    assert built.status is Status.FAILED
    assert "in run\n    gemm_kernel[grid](" in built.message
    assert "CompilationError" in built.message and "acc = tl.dot(a, b, acc)" in built.message
    assert "reduction dimensions" in built.message


def test_a_run_that_launches_nothing_fails_the_build(gemm: Family, task: Task, tmp_path: Path) -> None:
    source = (
        ZERO_KERNEL
        + "\n\ndef run(A, B, C, M, N, K, workspace):\n    if M < 0:\n        zero_kernel[(1,)](C, M, BLOCK=128)\n"
    )
    built = _build(gemm, task, source, tmp_path)
    assert built.status is Status.FAILED
    assert built.message == "run launched no kernel at m8192 (and 12 other shapes)"


def test_a_file_without_run_fails_the_build(gemm: Family, task: Task, tmp_path: Path) -> None:
    built = _build(gemm, task, ZERO_KERNEL, tmp_path)
    assert built.status is Status.FAILED and "candidate.py defines no function run(...)" in built.message


@pytest.mark.parametrize("configs", [1, 2])
def test_autotuning_over_several_configs_fails_the_build(
    gemm: Family, task: Task, tmp_path: Path, configs: int
) -> None:
    tuned = ", ".join(f'triton.Config({{"BLOCK": {64 << i}}})' for i in range(configs))
    kernel = ZERO_KERNEL.replace("@triton.jit", f'@triton.autotune(configs=[{tuned}], key=["n"])\n@triton.jit')
    source = kernel + (
        '\n\ndef run(A, B, C, M, N, K, workspace):\n    zero_kernel[lambda meta: (triton.cdiv(M * N, meta["BLOCK"]),)](C, M * N)\n'
    )
    built = _build(gemm, task, source, tmp_path)
    if configs == 1:  # one configuration is a choice, not tuning: built, its grid from the callable
        assert built.passed, built.message
        assert built.data["launches"]["m70"][0]["grid"] == [math.ceil(70 * 7168 / 64)]
    else:
        assert built.status is Status.FAILED
        assert "triton.autotune with 2 configs for zero_kernel" in built.message
        assert "in run\n    zero_kernel[lambda meta" in built.message


def test_a_kernel_from_another_file_fails_the_build(gemm: Family, task: Task, tmp_path: Path) -> None:
    source = (
        "import sys\nfrom pathlib import Path\n\n"
        f"Path(__file__).with_name('elsewhere.py').write_text({ZERO_KERNEL!r})\n"
        "sys.path.insert(0, str(Path(__file__).parent))\n"
        "from elsewhere import zero_kernel\n\n\n"
        "def run(A, B, C, M, N, K, workspace):\n    zero_kernel[(1,)](C, M, BLOCK=128)\n"
    )
    built = _build(gemm, task, source, tmp_path)
    assert built.status is Status.FAILED
    assert "kernel zero_kernel comes from elsewhere, not the candidate's file" in built.message


def test_run_is_confined_and_ends_at_the_timeout(gemm: Family, task: Task, tmp_path: Path) -> None:
    if not make_sandbox([ROOT], [tmp_path]).prefix:
        pytest.skip("no sandbox on this machine")
    touch = f"    Path({str(ROOT / 'ptxbench-triton-was-here')!r}).write_text('x')\n"
    source = ZERO_KERNEL + f"\nfrom pathlib import Path\n\n\ndef run(A, B, C, M, N, K, workspace):\n{touch}"
    built = _build(gemm, task, source, tmp_path / "writes")
    assert built.status is Status.FAILED and "Read-only file system" in built.message, built.message
    assert not (ROOT / "ptxbench-triton-was-here").exists()
    assert built.data["sandbox"].startswith("network and process namespaces")

    spins = ZERO_KERNEL + "\n\ndef run(A, B, C, M, N, K, workspace):\n    while True:\n        pass\n"
    built = _build(gemm, task, spins, tmp_path / "spins", timeout=5)
    assert built.status is Status.FAILED
    assert built.message == "compiling and calling run at every shape did not finish within 5 s"


def test_run_gets_the_page_tables_as_lists_at_build_time(tmp_path: Path) -> None:
    """A paged family's host-visible inputs reach `run` as lists of ints (the values the launcher plans from):
    here the grid is the number of pages in use, read from the host copy of kv_indptr."""
    from pytest_ptxbench import paged
    from pytest_ptxbench.task.catalogue import load_family

    decode = load_family(TASKS / "gqa_paged_decode.yaml")
    task = next(t for t in decode.tasks if t.axes["P"] == 64)
    source = ZERO_KERNEL + (
        "\n\ndef run(q, k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len, kv_indptr_host, kv_indices_host,\n"
        "        kv_last_page_len_host, output, lse, B, H, KV, D, P, sm_scale, workspace):\n"
        "    assert isinstance(kv_indptr_host, list) and len(kv_indptr_host) == B + 1, type(kv_indptr_host)\n"
        "    assert len(kv_indices_host) == k_cache.shape[0] and len(kv_last_page_len_host) == B\n"
        "    used = kv_indptr_host[-1]\n"
        "    zero_kernel[(used,)](output, output.numel(), BLOCK=128)\n"
    )
    built = build_triton(source, decode, task, H100, tmp_path, 300)
    assert built.passed, built.message
    for shape in decode.shapes("all"):
        values = decode.values(task, shape.values)
        [launch] = built.data["launches"][shape.id]
        assert launch["grid"] == [paged.tables(values, 0)["kv_indptr"][-1]], shape.id
