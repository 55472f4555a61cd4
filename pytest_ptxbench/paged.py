"""Page tables of a paged KV cache, in plain Python: the harness computes them (no torch), the build and
capture children receive them as host arrays, the trusted child copies them to the GPU.

A shape fixes the batch `B`, the mean KV length `L` and a word `lens` for how lengths spread; the lengths
follow from those alone (so FLOPs and bytes are exact formulas: the lengths always sum to B·L), while
which physical pages hold a sequence is drawn from the run's seed (no kernel can assume them contiguous).
The cache holds `pages(B, L, P)` pages, more than the sequences use: the spare ones hold data no sequence
attends to.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

PATTERNS = ("equal", "ragged", "skewed", "one_long")


def pages(batch: int, mean: int, page_size: int) -> int:
    """The cache's pages: enough for B·L tokens in sequences of any lengths (each wastes under a page)."""
    return batch * mean // page_size + batch


def lengths(batch: int, mean: int, pattern: str) -> list[int]:
    """Per-sequence lengths, each at least 1, summing to exactly `batch * mean`.

    equal: all `mean`; ragged: uniform in [1, 2·mean); skewed: a power law (a few long, many short);
    one_long: one sequence holds half the tokens, the others share the rest.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"unknown length pattern {pattern!r} (known: {', '.join(PATTERNS)})")
    total = batch * mean
    draw = random.Random(f"{batch}-{mean}-{pattern}")  # a property of the shape, not of the run
    if pattern == "equal" or batch == 1:
        weights = [1.0] * batch
    elif pattern == "ragged":
        weights = [draw.uniform(1, 2 * mean - 1) for _ in range(batch)]
    elif pattern == "skewed":
        weights = [(i + 1) ** -1.2 for i in range(batch)]
        draw.shuffle(weights)
    else:
        weights = [1.0] * batch
        weights[draw.randrange(batch)] = batch - 1.0
    return _apportion(total, weights)


def _apportion(total: int, weights: list[float]) -> list[int]:
    """Integers ≥ 1 in proportion to `weights` summing to `total` (largest remainders get the rest)."""
    spare = total - len(weights)
    if spare < 0:
        raise ValueError(f"{total} tokens cannot give each of {len(weights)} sequences one")
    scale = spare / sum(weights)
    shares = [w * scale for w in weights]
    out = [1 + int(s) for s in shares]
    by_remainder = sorted(range(len(weights)), key=lambda i: int(shares[i]) - shares[i])
    for i in by_remainder[: total - sum(out)]:
        out[i] += 1
    return out


def tables(values: Mapping[str, Any], seed: int) -> dict[str, list[int]]:
    """kv_indptr [B + 1], kv_indices [pages] and kv_last_page_len [B] for the shape `values` (B, L, lens, P):
    sequence b's pages are kv_indices[kv_indptr[b]:kv_indptr[b + 1]], its last page holds kv_last_page_len[b]
    tokens. Indices past kv_indptr[B] are 0 (valid pages nobody reads)."""
    batch, mean = int(values["B"]), int(values["L"])
    return _pages(lengths(batch, mean, str(values["lens"])), batch, mean, int(values["P"]), seed)


def query_lengths(values: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """Prefill: (new tokens, all tokens) per sequence. The new ones spread as `lens` over B·Q; the earlier ones
    too, over B·(L − Q), so every sequence holds more tokens than it adds and all hold B·L."""
    batch, new, mean, pattern = int(values["B"]), int(values["Q"]), int(values["L"]), str(values["lens"])
    if mean <= new:
        raise ValueError(f"L {mean} must exceed Q {new}: every sequence has earlier tokens in its cache")
    queries = lengths(batch, new, pattern)
    return queries, [q + e for q, e in zip(queries, lengths(batch, mean - new, pattern), strict=True)]


def prefill_tables(values: Mapping[str, Any], seed: int) -> dict[str, list[int]]:
    """qo_indptr [B + 1] (where each sequence's new tokens start among the packed rows) and the page tables of
    `tables`, for a prefill shape (B, Q, L, lens, P)."""
    queries, totals = query_lengths(values)
    batch, mean = int(values["B"]), int(values["L"])
    return {"qo_indptr": _offsets(queries), **_pages(totals, batch, mean, int(values["P"]), seed)}


def prefill_counts(values: Mapping[str, Any]) -> dict[str, int]:
    """PAIRS: the (query, key) pairs attended over every sequence; causal with the mask at the bottom right."""
    causal = values["mask"] == "causal"
    queries, totals = query_lengths(values)
    return {"PAIRS": sum(q * k - (q * (q - 1) // 2 if causal else 0) for q, k in zip(queries, totals, strict=True))}


def _offsets(counts: list[int]) -> list[int]:
    out = [0]
    for count in counts:
        out.append(out[-1] + count)
    return out


def _pages(per_sequence: list[int], batch: int, mean: int, page: int, seed: int) -> dict[str, list[int]]:
    """The page tables of sequences of `per_sequence` tokens in a cache of pages(batch, mean, page) pages,
    shuffled by `seed`; indices past kv_indptr[B] are 0 (valid pages nobody reads)."""
    count = pages(batch, mean, page)
    order = list(range(count))
    random.Random(seed).shuffle(order)
    used = [-(-length // page) for length in per_sequence]
    indptr = _offsets(used)
    last = [length - (n - 1) * page for length, n in zip(per_sequence, used, strict=True)]
    indices = order[: indptr[-1]] + [0] * (count - indptr[-1])
    return {"kv_indptr": indptr, "kv_indices": indices, "kv_last_page_len": last}
