"""Reference implementations (torch, fp32 math on the GPU), run only in the trusted child.

Each takes the inputs by parameter name and the task/shape values, and returns the outputs in fp32.
A family's `derived_inputs` names the function here that computes some inputs from the drawn ones (the
backward pass needs the forward's O and LSE).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

Tensors = dict[str, torch.Tensor]
ROWS_PER_CHUNK = 1 << 26  # score-matrix elements per chunk: bounds the memory of the attention references


def gemm(inputs: Mapping[str, torch.Tensor], values: Mapping[str, Any]) -> Tensors:
    return {"C": inputs["A"].float() @ inputs["B"].float().T}


def _scores(q: torch.Tensor, k: torch.Tensor, values: Mapping[str, Any]) -> torch.Tensor:
    s = (q.float() @ k.float().transpose(-1, -2)) * float(values["D"]) ** -0.5
    if values["mask"] == "causal":
        rows, cols = s.shape[-2:]
        s = s.masked_fill(torch.ones(rows, cols, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return s


def _heads(tensor: torch.Tensor) -> torch.Tensor:
    """[B, H, ...] → [B*H, ...]"""
    return tensor.reshape(-1, *tensor.shape[2:])


def _chunks(values: Mapping[str, Any]) -> int:
    s = int(values["S"])
    return max(1, ROWS_PER_CHUNK // (s * s))


def attention_fwd(inputs: Mapping[str, torch.Tensor], values: Mapping[str, Any]) -> Tensors:
    q, k, v = (_heads(inputs[n]) for n in ("Q", "K", "V"))
    out, lse = torch.empty_like(q, dtype=torch.float32), torch.empty(q.shape[:-1], device=q.device)
    step = _chunks(values)
    for i in range(0, q.shape[0], step):
        s = _scores(q[i : i + step], k[i : i + step], values)
        lse[i : i + step] = torch.logsumexp(s, dim=-1)
        out[i : i + step] = torch.softmax(s, dim=-1) @ v[i : i + step].float()
    shape = inputs["Q"].shape
    return {"O": out.reshape(shape), "LSE": lse.reshape(shape[:-1])}


def attention_bwd(inputs: Mapping[str, torch.Tensor], values: Mapping[str, Any]) -> Tensors:
    q, k, v, o, do = (_heads(inputs[n]).float() for n in ("Q", "K", "V", "O", "dO"))
    lse = _heads(inputs["LSE"])
    scale = float(values["D"]) ** -0.5
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    step = _chunks(values)
    for i in range(0, q.shape[0], step):
        part = slice(i, i + step)
        p = torch.exp(_scores(q[part], k[part], values) - lse[part].unsqueeze(-1))
        dv[part] = p.transpose(-1, -2) @ do[part]
        dp = do[part] @ v[part].transpose(-1, -2)
        ds = p * (dp - (do[part] * o[part]).sum(-1, keepdim=True))
        dq[part] = ds @ k[part] * scale
        dk[part] = ds.transpose(-1, -2) @ q[part] * scale
    shape = inputs["Q"].shape
    return {"dQ": dq.reshape(shape), "dK": dk.reshape(shape), "dV": dv.reshape(shape)}


def attention_bwd_inputs(inputs: Mapping[str, torch.Tensor], values: Mapping[str, Any], seed: int) -> Tensors:
    """O and LSE as the forward computes them from Q, K, V (O rounded to bf16 as a kernel would store it)."""
    forward = attention_fwd(inputs, values)
    return {"O": forward["O"].to(torch.bfloat16), "LSE": forward["LSE"]}
