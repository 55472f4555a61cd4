"""Taking the kernel out of a model's reply."""

from __future__ import annotations

import pytest

from pytest_ptxbench.agent.extract import blocks, extract_kernel
from pytest_ptxbench.languages import LANGUAGES

CUDA, TRITON = LANGUAGES["cuda"], LANGUAGES["triton"]

LAUNCHER = "ptxbench_gemm"
KERNEL = 'extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, int M) {\n  return cudaSuccess;\n}\n'
HELPER = "__device__ float twice(float x) { return 2 * x; }\n"


@pytest.mark.parametrize("fence", ["cuda", "cu", "cpp", "c++", "CUDA"])
def test_each_accepted_fence(fence: str) -> None:
    found = extract_kernel(f"Sure.\n```{fence}\n{KERNEL}```\nDone.", CUDA, LAUNCHER)
    assert (found.source, found.problem) == (KERNEL, None)


def test_of_two_blocks_the_one_defining_the_launcher_wins() -> None:
    reply = (
        f"A helper:\n```cuda\n{HELPER}```\nThe file:\n```cuda\n{KERNEL}```\nUsage:\n```cpp\nptxbench_gemm(A, M);\n```\n"
    )
    assert extract_kernel(reply, CUDA, LAUNCHER).source == KERNEL


def test_of_two_defining_blocks_the_last_wins() -> None:
    revised = KERNEL.replace("cudaSuccess", "cudaGetLastError()")
    reply = f"```cuda\n{KERNEL}```\nOn second thought:\n```cuda\n{revised}```\n"
    assert extract_kernel(reply, CUDA, LAUNCHER).source == revised


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("I would tile by 128x256 and use TMA.", "the reply has no code block"),
        (f"```python\n{KERNEL}```", "the code is in ```python, not in a ```cuda block"),
        (f"```\n{KERNEL}```", "the code is in ```, not in a ```cuda block"),
        (f"```cuda\n{HELPER}```", "none of the 1 code block(s) defines ptxbench_gemm"),
        (f"```cuda\n{KERNEL[:40]}", "the ```cuda block is not closed: the code is incomplete"),
        (
            f"```cuda\n{KERNEL.split('{')[0].rstrip()};\n```",
            "none of the 1 code block(s) defines ptxbench_gemm",
        ),
    ],
    ids=["no-code", "wrong-fence", "bare-fence", "no-launcher", "truncated", "declaration-only"],
)
def test_replies_without_a_usable_kernel_say_why(reply: str, problem: str) -> None:
    found = extract_kernel(reply, CUDA, LAUNCHER)
    assert (found.source, found.problem) == (None, problem)


def test_truncation_and_refusal_are_named() -> None:
    cut = extract_kernel(f"```cuda\n{KERNEL[:40]}", CUDA, LAUNCHER, truncated=True)
    assert (
        cut.problem
        == "the ```cuda block is not closed: the code is incomplete (the reply stopped at the output-token limit)"
    )
    refused = extract_kernel("I can't help with that.", CUDA, LAUNCHER, refusal="refusal")
    assert refused.problem == "the reply declined (refusal) and holds no kernel"


def test_blocks_keep_longer_fences_and_unclosed_ends() -> None:
    found = blocks("````cuda\n```inner```\n````\ntext\n```cu\nint x;")
    assert [(b.language, b.code, b.closed) for b in found] == [
        ("cuda", "```inner```\n", True),
        ("cu", "int x;\n", False),
    ]


def test_defines_needs_a_body() -> None:
    assert CUDA.defines("cudaError_t ptxbench_gemm(int (*f)(int), int M)\n{ return 0; }", LAUNCHER)
    assert not CUDA.defines("cudaError_t ptxbench_gemm(int M);\nint main() { ptxbench_gemm(3); }", LAUNCHER)
    assert not CUDA.defines("cudaError_t ptxbench_gemm_v2(int M) {}", LAUNCHER)


TRITON_FILE = (
    "import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x):\n    pass\n\n"
    "def run(A, B, C, M, N, K, workspace):\n    k[(1,)](C)\n"
)


def test_a_triton_candidate_comes_from_a_python_block_defining_run() -> None:
    reply = f"The idea.\n```cuda\n{KERNEL}```\nIn Triton:\n```python\n{TRITON_FILE}```\n"
    assert extract_kernel(reply, TRITON, "run").source == TRITON_FILE
    assert extract_kernel(f"```py\n{TRITON_FILE}```", TRITON, "run").source == TRITON_FILE
    helper_only = "```python\ndef helper(x):\n    return run(x)\n```"
    assert extract_kernel(helper_only, TRITON, "run").problem == "none of the 1 code block(s) defines run"
    assert extract_kernel(f"```cuda\n{KERNEL}```", TRITON, "run").problem == (
        "the code is in ```cuda, not in a ```python block"
    )
    nested = "```python\nclass K:\n    def run(self):\n        pass\n```"  # a method is not the module's run
    assert extract_kernel(nested, TRITON, "run").source is None
