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


def paged_sequences(inputs: Mapping[str, torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each sequence's K and V, [length, KV, D], gathered from its pages in token order."""
    indptr, indices = inputs["kv_indptr"].tolist(), inputs["kv_indices"]
    last = inputs["kv_last_page_len"].tolist()
    out = []
    for b in range(len(last)):
        pages = indices[indptr[b] : indptr[b + 1]].long()
        length = (len(pages) - 1) * inputs["k_cache"].shape[1] + last[b] if len(pages) else 0
        k, v = (inputs[n][pages].flatten(0, 1)[:length] for n in ("k_cache", "v_cache"))
        out.append((k, v))
    return out


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> Tensors:
    """q [rows, H, D] against k, v [keys, KV, D] (query head h reads KV head h // (H / KV)); `mask` [rows, keys]
    True where a key is hidden. A row that attends to no key gets output 0 and LSE -inf (the log of an empty
    sum), never NaN."""
    group = q.shape[1] // k.shape[1]
    keys, values = (t.float().repeat_interleave(group, dim=1).transpose(0, 1) for t in (k, v))  # [H, keys, D]
    scores = (q.float().transpose(0, 1) @ keys.transpose(1, 2)) * scale  # [H, rows, keys]
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # -inf where nothing is attended
    weights = torch.exp(scores - lse.unsqueeze(-1)).nan_to_num(0.0)
    return {"output": (weights @ values).transpose(0, 1), "lse": lse.transpose(0, 1)}


def gqa_paged_decode(inputs: Mapping[str, torch.Tensor], values: Mapping[str, Any]) -> Tensors:
    scale = float(values["D"]) ** -0.5
    q = inputs["q"]
    output = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    for b, (k, v) in enumerate(paged_sequences(inputs)):
        one = gqa_attention(q[b : b + 1], k, v, None, scale)
        output[b], lse[b] = one["output"][0], one["lse"][0]
    return {"output": output, "lse": lse}


def gqa_paged_prefill(inputs: Mapping[str, torch.Tensor], values: Mapping[str, Any]) -> Tensors:
    """Each sequence's new rows of q against all its keys; causal with the mask at the bottom right (row i of a
    sequence of n new tokens and k keys attends keys 0 .. i + k - n). Rows go in chunks (scores stay small)."""
    scale, causal = float(values["D"]) ** -0.5, values["mask"] == "causal"
    q, starts = inputs["q"], inputs["qo_indptr"].tolist()
    output = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.zeros(q.shape[:2], dtype=torch.float32, device=q.device)
    for b, (k, v) in enumerate(paged_sequences(inputs)):
        count, keys = starts[b + 1] - starts[b], k.shape[0]
        step = max(1, ROWS_PER_CHUNK // (q.shape[1] * max(keys, 1)))
        for first in range(0, count, step):
            rows = torch.arange(first, min(first + step, count), device=q.device)
            mask = None
            if causal:
                mask = torch.arange(keys, device=q.device)[None, :] > (rows[:, None] + keys - count)
            one = gqa_attention(q[starts[b] + rows], k, v, mask, scale)
            output[starts[b] + rows], lse[starts[b] + rows] = one["output"], one["lse"]
    return {"output": output, "lse": lse}
