#!/usr/bin/env python3
"""How many elements of an attention backward must miss the task's tolerance for rounding alone, on CPU.

Any bf16 tensor-core backward rounds P and dS to bf16 before the products that make dQ, dK and dV. This
models exactly that rounding (numpy, fp32 accumulation) on spiky inputs as the task generates them
(normal, 0.1 % outliers of 16x, bf16) for two S4096 d128 heads, causal and not, and counts the elements
past atol AND rtol 0.03 against the fp32 reference: the evidence behind attention_bwd's matched ratio.

Usage: python3 scripts/bf16_backward_rounding.py     (about a minute)
"""

from __future__ import annotations

import numpy as np

S, D, HEADS, TOLERANCE = 4096, 128, 2, 0.03
rng = np.random.default_rng(0)


def bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bf16 (ties to even), kept as float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)


def spiky(shape: tuple[int, int]) -> np.ndarray:
    values = rng.standard_normal(shape).astype(np.float32)
    return bf16(np.where(rng.random(shape) < 0.001, values * 16, values))


def main() -> None:
    scale = D**-0.5
    wrong: dict[str, int] = {}
    for _ in range(HEADS):
        q, k, v, do = (spiky((S, D)) for _ in range(4))
        scores = (q @ k.T) * scale
        for causal in (False, True):
            s = scores.copy()
            if causal:
                s[np.triu_indices(S, 1)] = -np.inf
            m = s.max(1, keepdims=True)
            lse = m + np.log(np.exp(s - m).sum(1, keepdims=True))
            p = np.exp(s - lse)
            o = bf16(p @ v)  # the forward's output, stored as bf16
            ds = p * (do @ v.T - (do * o).sum(1, keepdims=True))
            exact = {"dQ": ds @ k * scale, "dK": ds.T @ q * scale, "dV": p.T @ do}
            rounded = {"dQ": bf16(bf16(ds) @ k * scale), "dK": bf16(bf16(ds).T @ q * scale), "dV": bf16(bf16(p).T @ do)}
            for name, reference in exact.items():
                error = np.abs(rounded[name] - reference)
                key = f"{name} {'causal' if causal else 'full'}"
                miss = (error > TOLERANCE) & (error > TOLERANCE * np.abs(reference))
                wrong[key] = wrong.get(key, 0) + int(miss.sum())
    for key, count in wrong.items():
        print(f"{key}: {count} of {HEADS * S * D} elements past atol and rtol {TOLERANCE}")


if __name__ == "__main__":
    main()
