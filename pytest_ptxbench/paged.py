"""Page tables of a paged KV cache, in plain Python: the harness computes them (no torch), the build and
capture children receive them as host arrays, the trusted child copies them to the GPU.

A shape fixes the batch `B`, the mean KV length `L` and how lengths spread, `lens`: a pattern word (the
lengths then sum to exactly B·L) or the lengths themselves, `given:` and one per sequence (`given:4096,17`;
for prefill new/all tokens, `given:3/4096,1/17`: a FlashInfer-Trace workload's, summing to at most B·L).
The lengths follow from the shape alone, and FLOPs and bytes from their sums (`decode_counts`,
`prefill_counts`); which physical pages hold a sequence is drawn from the run's seed (no kernel can assume
them contiguous). The cache holds `pages(B, L, P)` pages, more than the sequences use: the spare ones hold
data no sequence attends to.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from typing import Any

PATTERNS = ("equal", "ragged", "skewed", "one_long")
GIVEN = "given:"


def pages(batch: int, mean: int, page_size: int) -> int:
    """The cache's pages: enough for B·L tokens in sequences of any lengths (each wastes under a page)."""
    return batch * mean // page_size + batch


def lengths(batch: int, mean: int, pattern: str) -> list[int]:
    """Per-sequence lengths, each at least 1, summing to exactly `batch * mean` (or at most, when given).

    equal: all `mean`; ragged: uniform in [1, 2·mean); skewed: a power law (a few long, many short);
    one_long: one sequence holds half the tokens, the others share the rest; `given:`: these.
    """
    if pattern.startswith(GIVEN):
        return _at_most([n for (n,) in _given(batch, pattern, 1)], batch * mean, "L", pattern)
    if pattern not in PATTERNS:
        raise ValueError(f"unknown length pattern {pattern!r} (known: {', '.join(PATTERNS)}, {GIVEN}N,N,...)")
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


def given(per_sequence: list[int] | list[tuple[int, int]]) -> str:
    """The `lens` word of these lengths: `given:` and each sequence's, or its (new, all) tokens for prefill."""
    return GIVEN + ",".join("/".join(map(str, n)) if isinstance(n, tuple) else str(n) for n in per_sequence)


def _given(batch: int, pattern: str, width: int) -> list[tuple[int, ...]]:
    """The numbers of a `given:` word, `width` a sequence (1 for decode, 2 for prefill), each at least 1."""
    try:
        rows = [tuple(int(n) for n in item.split("/")) for item in pattern[len(GIVEN) :].split(",")]
    except ValueError:
        rows = []
    if not rows or any(len(r) != width or min(r) < 1 for r in rows):
        form = "N/M" if width == 2 else "N"
        raise ValueError(f"lens {_short(pattern)} is not '{GIVEN}' and one {form} (each at least 1) per sequence")
    if len(rows) != batch:
        raise ValueError(f"lens {_short(pattern)} gives {len(rows)} sequences, B is {batch}")
    return rows


def _at_most(numbers: list[int], bound: int, axis: str, pattern: str) -> list[int]:
    if sum(numbers) > bound:
        raise ValueError(f"lens {_short(pattern)} holds {sum(numbers)} tokens, more than B·{axis} = {bound}")
    return numbers


def _short(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:37] + "...")


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


def decode_counts(values: Mapping[str, Any]) -> dict[str, int]:
    """TOKENS: the KV tokens of every sequence (B·L for a pattern)."""
    return {"TOKENS": sum(lengths(int(values["B"]), int(values["L"]), str(values["lens"])))}


def query_lengths(values: Mapping[str, Any]) -> tuple[list[int], list[int]]:
    """Prefill: (new tokens, all tokens) per sequence. The new ones spread as `lens` over B·Q; the earlier ones
    too, over B·(L − Q), so every sequence holds more tokens than it adds and all hold B·L. Given ones hold
    at least as many as they add, at most B·Q and B·L in all."""
    batch, new, mean, pattern = int(values["B"]), int(values["Q"]), int(values["L"]), str(values["lens"])
    if pattern.startswith(GIVEN):
        rows = _given(batch, pattern, 2)
        if any(q > k for q, k in rows):
            raise ValueError(f"lens {_short(pattern)} adds more tokens to a sequence than it holds (N/M, N > M)")
        queries, totals = ([r[i] for r in rows] for i in (0, 1))
        return _at_most(queries, batch * new, "Q", pattern), _at_most(totals, batch * mean, "L", pattern)
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
    """PAIRS: the (query, key) pairs attended over every sequence (causal: the mask at the bottom right);
    ROWS: the new tokens, TOKENS: all tokens, of every sequence (B·Q and B·L for a pattern)."""
    causal = values["mask"] == "causal"
    queries, totals = query_lengths(values)
    pairs = sum(q * k - (q * (q - 1) // 2 if causal else 0) for q, k in zip(queries, totals, strict=True))
    return {"PAIRS": pairs, "ROWS": sum(queries), "TOKENS": sum(totals)}


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


def shape_of(tables: Mapping[str, list[int]], page: int) -> dict[str, int | str]:
    """The shape whose sequences these page tables hold (a FlashInfer-Trace workload's): B, the mean lengths
    rounded up and the `given:` lengths; a prefill's when `qo_indptr` is among them. `kv_last_page_len` may be
    left out for pages of one token. ValueError saying what does not fit."""
    indptr = tables["kv_indptr"]
    pages_of = [b - a for a, b in itertools.pairwise(indptr)]
    last = tables.get("kv_last_page_len", [1] * len(pages_of))
    if not pages_of or len(last) != len(pages_of) or min(pages_of) < 1 or not all(1 <= n <= page for n in last):
        raise ValueError(
            f"kv_indptr {_head(indptr)} and kv_last_page_len {_head(last)} give no sequences of at least one page"
            f" whose last page holds 1..{page} tokens"
        )
    totals = [(n - 1) * page + n_last for n, n_last in zip(pages_of, last, strict=True)]
    batch = len(totals)
    if "qo_indptr" not in tables:
        return {"B": batch, "L": -(-sum(totals) // batch), "lens": given(totals)}
    starts = tables["qo_indptr"]
    queries = [b - a for a, b in itertools.pairwise(starts)]
    if len(queries) != batch or min(queries) < 1 or any(q > n for q, n in zip(queries, totals, strict=True)):
        raise ValueError(
            f"qo_indptr {_head(starts)} does not give each of {batch} sequences 1 to its length new tokens"
        )
    rows = list(zip(queries, totals, strict=True))
    return {"B": batch, "Q": -(-sum(queries) // batch), "L": -(-sum(totals) // batch), "lens": given(rows)}


def _head(numbers: list[int]) -> str:
    return str(numbers) if len(numbers) <= 6 else f"[{', '.join(map(str, numbers[:5]))}, ... ({len(numbers)})]"
