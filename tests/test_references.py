"""The fp32 references (torch, where it is installed: the GPU machine) on small cases worked out by hand."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="the references run in the trusted child, with torch")
references = pytest.importorskip("pytest_ptxbench.references")


def test_a_row_with_nothing_to_attend_gets_output_zero_and_lse_minus_infinity() -> None:
    q = torch.randn(2, 4, 8)  # rows, H, D
    k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8)  # keys, KV, D: two query heads per KV head
    mask = torch.tensor([[True, True, True], [False, True, True]])  # row 0 sees nothing, row 1 key 0 only
    got = references.gqa_attention(q, k, v, mask, 0.5)
    assert torch.equal(got["output"][0], torch.zeros(4, 8))
    assert torch.all(got["lse"][0] == -math.inf)
    for h in range(4):  # one key: its value, and the LSE is that one score
        assert torch.allclose(got["output"][1, h], v[0, h // 2])
        assert torch.allclose(got["lse"][1, h], (q[1, h] @ k[0, h // 2]) * 0.5)
    assert not torch.isnan(got["output"]).any()


def test_paged_decode_gathers_each_sequence_from_its_own_pages() -> None:
    """Two sequences in shuffled pages of 2 tokens, against attention on the tokens laid out in order."""
    from pytest_ptxbench import paged

    values = {"B": 2, "L": 3, "P": 2, "lens": "ragged", "H": 4, "KV": 2, "D": 8}
    tables = paged.tables(values, seed=3)
    lengths = paged.lengths(2, 3, "ragged")
    pages = paged.pages(2, 3, 2)
    inputs = {
        "q": torch.randn(2, 4, 8),
        "k_cache": torch.randn(pages, 2, 2, 8),
        "v_cache": torch.randn(pages, 2, 2, 8),
        **{name: torch.tensor(table, dtype=torch.int32) for name, table in tables.items()},
    }
    got = references.gqa_paged_decode(inputs, values)
    indptr, indices = tables["kv_indptr"], tables["kv_indices"]
    for b, length in enumerate(lengths):
        mine = indices[indptr[b] : indptr[b + 1]]
        k = torch.cat([inputs["k_cache"][p] for p in mine])[:length]
        v = torch.cat([inputs["v_cache"][p] for p in mine])[:length]
        for h in range(4):
            scores = (k[:, h // 2] @ inputs["q"][b, h]) * 8**-0.5
            assert torch.allclose(got["lse"][b, h], torch.logsumexp(scores, 0), atol=1e-5)
            assert torch.allclose(got["output"][b, h], torch.softmax(scores, 0) @ v[:, h // 2], atol=1e-5)


@pytest.mark.parametrize("mask", ["causal", "full"])
def test_paged_prefill_masks_at_the_bottom_right(mask: str) -> None:
    """Row i of a sequence of n new tokens among k attends keys 0 .. i + k - n (causal) or all k (full),
    against attention computed key by key."""
    from pytest_ptxbench import paged

    values = {"B": 3, "Q": 4, "L": 9, "P": 2, "lens": "ragged", "H": 4, "KV": 2, "D": 8, "mask": mask}
    tables = paged.prefill_tables(values, seed=2)
    queries, totals = paged.query_lengths(values)
    pages = paged.pages(3, 9, 2)
    inputs = {
        "q": torch.randn(12, 4, 8, dtype=torch.float64),
        "k_cache": torch.randn(pages, 2, 2, 8, dtype=torch.float64),
        "v_cache": torch.randn(pages, 2, 2, 8, dtype=torch.float64),
        **{name: torch.tensor(table, dtype=torch.int32) for name, table in tables.items()},
    }
    got = references.gqa_paged_prefill(inputs, values)
    indptr, indices = tables["kv_indptr"], tables["kv_indices"]
    for b, (count, keys) in enumerate(zip(queries, totals, strict=True)):
        mine = indices[indptr[b] : indptr[b + 1]]
        k = torch.cat([inputs["k_cache"][p] for p in mine])[:keys]
        v = torch.cat([inputs["v_cache"][p] for p in mine])[:keys]
        for i in range(count):
            row = tables["qo_indptr"][b] + i
            seen = i + keys - count + 1 if mask == "causal" else keys
            for h in range(4):
                scores = (k[:seen, h // 2] @ inputs["q"][row, h]) * 8**-0.5
                assert torch.allclose(got["lse"][row, h], torch.logsumexp(scores, 0).float(), atol=1e-5)
                expected = (torch.softmax(scores, 0) @ v[:seen, h // 2]).float()
                assert torch.allclose(got["output"][row, h], expected, atol=1e-5)
