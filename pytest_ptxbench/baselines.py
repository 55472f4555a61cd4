"""Vendor baselines (torch → cuBLAS, cuDNN), run only in the trusted child and timed exactly as the
candidate is. A baseline that cannot run raises: never a silent fallback to another backend.

Each takes the current inputs, preallocated outputs, the task/shape values, and a `state` dict that
lives as long as the shape's input sets (for work a baseline does once, outside the timed runs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

aten = torch.ops.aten


def gemm_cublas(
    inputs: Mapping[str, torch.Tensor],
    outputs: Mapping[str, torch.Tensor],
    values: Mapping[str, Any],
    state: dict[str, Any],
) -> None:
    torch.matmul(inputs["A"], inputs["B"].T, out=outputs["C"])


def _cudnn_forward(inputs: Mapping[str, torch.Tensor], values: Mapping[str, Any]) -> tuple[Any, ...]:
    """cuDNN's fused attention with the log-sum-exp requested (`compute_log_sumexp=True`)."""
    return tuple(
        aten._scaled_dot_product_cudnn_attention(
            inputs["Q"],
            inputs["K"],
            inputs["V"],
            None,
            True,
            0.0,
            values["mask"] == "causal",
            False,
            scale=float(values["D"]) ** -0.5,
        )
    )


def attention_fwd_cudnn(
    inputs: Mapping[str, torch.Tensor],
    outputs: Mapping[str, torch.Tensor],
    values: Mapping[str, Any],
    state: dict[str, Any],
) -> None:
    _cudnn_forward(inputs, values)


def attention_bwd_cudnn(
    inputs: Mapping[str, torch.Tensor],
    outputs: Mapping[str, torch.Tensor],
    values: Mapping[str, Any],
    state: dict[str, Any],
) -> None:
    """cuDNN's fused backward; its own forward (for the LSE layout and RNG state it expects) runs once."""
    if "forward" not in state:
        state["forward"] = _cudnn_forward(inputs, values)
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset = state["forward"][:8]
    aten._scaled_dot_product_cudnn_attention_backward(
        inputs["dO"],
        inputs["Q"],
        inputs["K"],
        inputs["V"],
        out,
        lse,
        seed,
        offset,
        None,
        cum_q,
        cum_k,
        max_q,
        max_k,
        0.0,
        values["mask"] == "causal",
        scale=float(values["D"]) ** -0.5,
    )
