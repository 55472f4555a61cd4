"""Taking the kernel out of a model's reply."""

from __future__ import annotations

import pytest

from pytest_ptxbench.agent.extract import blocks, defines, extract_kernel

LAUNCHER = "ptxbench_gemm"
KERNEL = 'extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, int M) {\n  return cudaSuccess;\n}\n'
HELPER = "__device__ float twice(float x) { return 2 * x; }\n"


@pytest.mark.parametrize("fence", ["cuda", "cu", "cpp", "c++", "CUDA"])
def test_each_accepted_fence(fence: str) -> None:
    found = extract_kernel(f"Sure.\n```{fence}\n{KERNEL}```\nDone.", LAUNCHER)
    assert (found.source, found.problem) == (KERNEL, None)


def test_of_two_blocks_the_one_defining_the_launcher_wins() -> None:
    reply = (
        f"A helper:\n```cuda\n{HELPER}```\nThe file:\n```cuda\n{KERNEL}```\nUsage:\n```cpp\nptxbench_gemm(A, M);\n```\n"
    )
    assert extract_kernel(reply, LAUNCHER).source == KERNEL


def test_of_two_defining_blocks_the_last_wins() -> None:
    revised = KERNEL.replace("cudaSuccess", "cudaGetLastError()")
    reply = f"```cuda\n{KERNEL}```\nOn second thought:\n```cuda\n{revised}```\n"
    assert extract_kernel(reply, LAUNCHER).source == revised


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("I would tile by 128x256 and use TMA.", "the reply has no code block"),
        (f"```python\n{KERNEL}```", "the code is in ```python, not in a ```cuda block"),
        (f"```\n{KERNEL}```", "the code is in ```, not in a ```cuda block"),
        (f"```cuda\n{HELPER}```", "none of the 1 code block(s) defines the launcher ptxbench_gemm"),
        (f"```cuda\n{KERNEL[:40]}", "the ```cuda block is not closed: the code is incomplete"),
        (
            f"```cuda\n{KERNEL.split('{')[0].rstrip()};\n```",
            "none of the 1 code block(s) defines the launcher ptxbench_gemm",
        ),
    ],
    ids=["no-code", "wrong-fence", "bare-fence", "no-launcher", "truncated", "declaration-only"],
)
def test_replies_without_a_usable_kernel_say_why(reply: str, problem: str) -> None:
    found = extract_kernel(reply, LAUNCHER)
    assert (found.source, found.problem) == (None, problem)


def test_truncation_and_refusal_are_named() -> None:
    cut = extract_kernel(f"```cuda\n{KERNEL[:40]}", LAUNCHER, truncated=True)
    assert (
        cut.problem
        == "the ```cuda block is not closed: the code is incomplete (the reply stopped at the output-token limit)"
    )
    refused = extract_kernel("I can't help with that.", LAUNCHER, refusal="refusal")
    assert refused.problem == "the reply declined (refusal) and holds no kernel"


def test_blocks_keep_longer_fences_and_unclosed_ends() -> None:
    found = blocks("````cuda\n```inner```\n````\ntext\n```cu\nint x;")
    assert [(b.language, b.code, b.closed) for b in found] == [
        ("cuda", "```inner```\n", True),
        ("cu", "int x;\n", False),
    ]


def test_defines_needs_a_body() -> None:
    assert defines("cudaError_t ptxbench_gemm(int (*f)(int), int M)\n{ return 0; }", LAUNCHER)
    assert not defines("cudaError_t ptxbench_gemm(int M);\nint main() { ptxbench_gemm(3); }", LAUNCHER)
    assert not defines("cudaError_t ptxbench_gemm_v2(int M) {}", LAUNCHER)
