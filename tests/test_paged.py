"""Paged KV-cache families: page tables, host-visible inputs in the task schema, and the rules they bring
(an opcode with alternatives, the LSE of a row with nothing to attend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pytest_ptxbench import paged
from pytest_ptxbench.parsers import sass
from pytest_ptxbench.stages import check
from pytest_ptxbench.task.catalogue import HostInputs, TaskFileError, Tolerance, load_family, resolved_params

from .conftest import TASKS

DECODE = TASKS / "gqa_paged_decode.yaml"
PREFILL = TASKS / "gqa_paged_prefill.yaml"


@pytest.mark.parametrize("pattern", paged.PATTERNS)
@pytest.mark.parametrize(("batch", "mean"), [(64, 4096), (7, 3001), (1, 70), (256, 500)])
def test_lengths_sum_to_the_shape_and_are_never_empty(pattern: str, batch: int, mean: int) -> None:
    lengths = paged.lengths(batch, mean, pattern)
    assert len(lengths) == batch and sum(lengths) == batch * mean and min(lengths) >= 1
    assert lengths == paged.lengths(batch, mean, pattern)  # a property of the shape


def test_length_patterns_spread_as_named() -> None:
    assert set(paged.lengths(64, 4096, "equal")) == {4096}
    skewed = sorted(paged.lengths(128, 1024, "skewed"))
    assert skewed[-1] > 20 * skewed[len(skewed) // 2]  # a few long, many short
    long = paged.lengths(16, 8192, "one_long")
    assert max(long) == pytest.approx(16 * 8192 / 2, abs=16) and sorted(long)[-2] < 8192
    with pytest.raises(ValueError, match="unknown length pattern 'zipf'"):
        paged.lengths(4, 10, "zipf")


@pytest.mark.parametrize("page", [1, 64])
def test_page_tables_hold_each_sequence_in_its_own_pages(page: int) -> None:
    values = {"B": 32, "L": 2048, "P": page, "lens": "ragged"}
    tables = paged.tables(values, seed=7)
    indptr, indices, last = tables["kv_indptr"], tables["kv_indices"], tables["kv_last_page_len"]
    pages = paged.pages(32, 2048, page)
    assert len(indptr) == 33 and len(indices) == pages and len(last) == 32
    lengths = paged.lengths(32, 2048, "ragged")
    for b, length in enumerate(lengths):
        used = indptr[b + 1] - indptr[b]
        assert used == -(-length // page) and 1 <= last[b] <= page
        assert (used - 1) * page + last[b] == length
    owned = indices[: indptr[-1]]
    assert len(set(owned)) == len(owned) and max(owned) < pages  # no page shared, all inside the cache
    other = paged.tables(values, seed=8)
    assert other["kv_indptr"] == indptr and other["kv_last_page_len"] == last  # the lengths are the shape's
    assert other["kv_indices"] != indices  # which pages hold them is the run's


def test_the_decode_family_declares_its_page_tables_host_visible() -> None:
    family = load_family(DECODE)
    assert family.host_inputs == HostInputs(
        "pytest_ptxbench.paged:tables", ("kv_indptr", "kv_indices", "kv_last_page_len")
    )
    values = {**family.tasks[1].axes, "B": 3, "L": 70, "lens": "ragged"}
    params = {p["name"]: p for p in resolved_params(family, values)}
    assert params["kv_indices_host"] == {
        "name": "kv_indices_host",
        "role": "host",
        "ctype": "const int*",
        "dtype": None,
        "of": "kv_indices",
    }
    tables = family.host_inputs.tables(values, 1) if family.host_inputs else {}
    for name, table in tables.items():  # the tables fill their declared shapes exactly
        assert [len(table)] == params[name]["shape"], name
    assert "const int* kv_indptr_host" in family.launcher.declaration()
    assert family.min_tensor_share == 0.0 and family.max_simt_share == 4.0


def _param(data: dict[str, Any], name: str) -> dict[str, Any]:
    params: list[dict[str, Any]] = data["launcher"]["params"]
    return next(p for p in params if p["name"] == name)


BROKEN = [
    (
        lambda d: _param(d, "kv_indptr_host").update(of="kv_indptr2"),
        "launcher.params[6].of: 'kv_indptr2' is not one of host_inputs.names",
    ),
    (
        lambda d: _param(d, "kv_indptr_host").pop("of"),
        "launcher.params[6].of: a host parameter names the input it mirrors",
    ),
    (
        lambda d: _param(d, "q").update(of="kv_indptr"),
        "launcher.params[0].of: a host parameter names the input it mirrors",
    ),
    (lambda d: d["host_inputs"].update(names=["q"]), "host_inputs.names[0]: 'q' is not an i32 input"),
    (
        lambda d: d["host_inputs"].update(names=["kv_indptr", "kv_indptr"]),
        "host_inputs.names: expected i32 inputs, each once",
    ),
    (lambda d: d["host_inputs"].update(function="paged.tables"), "host_inputs.function: expected 'module:function'"),
    (lambda d: d.pop("host_inputs"), "launcher.params: integer input 'kv_indptr' is drawn from no distribution"),
    (
        lambda d: d.update(derived_inputs={"function": "m:f", "names": ["kv_indptr"]}),
        "host_inputs.names: 'kv_indptr' is also in derived_inputs.names",
    ),
    (lambda d: d.update(min_tensor_share=-0.1), "min_tensor_share: must not be negative"),
    (lambda d: d.update(max_simt_share="x"), "max_simt_share: expected an integer or a number, got 'x'"),
]


def test_a_host_inputs_function_must_return_exactly_its_names() -> None:
    host = HostInputs("pytest_ptxbench.paged:tables", ("kv_indptr", "kv_indices"))
    with pytest.raises(ValueError, match=r"returned \['kv_indices', 'kv_indptr', 'kv_last_page_len'\]"):
        host.tables({"B": 2, "L": 5, "P": 1, "lens": "equal"}, 0)


def test_an_opcode_pattern_may_name_alternatives() -> None:
    assert sass.matches("UBLKCP.S.G|UTMALDG", "UBLKCP.S.G")
    assert sass.matches("UBLKCP.S.G|UTMALDG", "UTMALDG.4D")
    assert not sass.matches("UBLKCP.S.G|UTMALDG", "UBLKCP.G.S")  # a store to global is not a load
    assert not sass.matches("UBLKCP.S.G|UTMALDG", "LDGSTS.E.BYPASS.128")


def test_an_empty_rows_lse_is_minus_infinity_and_nothing_else_is() -> None:
    """A row that attends to no key: LSE −inf (the log of an empty sum) is right there, and only there."""
    expected = np.array([0.5, -np.inf, 2.0], dtype=np.float32)
    fine = check.compare("lse", "set", expected.copy(), "fp32", expected, Tolerance(1e-3, 1e-3), 0xFF)
    assert fine.passes(1.0) and fine.wrong == 0
    finite = check.compare(
        "lse", "set", np.array([0.5, 0.0, 2.0], np.float32), "fp32", expected, Tolerance(1e-3, 1e-3), 0xFF
    )
    assert finite.wrong == 1 and "lse[1] = 0, expected -inf" in finite.worst[0]
    stray = check.compare(
        "lse", "set", np.array([-np.inf, -np.inf, np.inf], np.float32), "fp32", expected, Tolerance(1e-3, 1e-3), 0xFF
    )
    assert stray.wrong == 2 and stray.nonfinite == 2 and not stray.passes(0.5)


@pytest.mark.parametrize("pattern", paged.PATTERNS)
def test_prefill_adds_fewer_tokens_than_each_sequence_holds(pattern: str) -> None:
    values = {"B": 7, "Q": 300, "L": 1000, "lens": pattern, "P": 64, "mask": "causal"}
    queries, totals = paged.query_lengths(values)
    assert sum(queries) == 7 * 300 and sum(totals) == 7 * 1000
    assert all(1 <= q < k for q, k in zip(queries, totals, strict=True))
    tables = paged.prefill_tables(values, seed=5)
    assert tables["qo_indptr"] == [sum(queries[:b]) for b in range(8)]
    pages, last = tables["kv_indptr"], tables["kv_last_page_len"]
    assert [(pages[b + 1] - pages[b] - 1) * 64 + last[b] for b in range(7)] == totals
    with pytest.raises(ValueError, match="L 300 must exceed Q 300"):
        paged.query_lengths({**values, "L": 300})


def test_prefill_flops_count_the_pairs_each_mask_attends() -> None:
    """Sequences of n new tokens and k keys: full attends n·k pairs, causal at the bottom right n·k − n(n−1)/2."""
    family = load_family(PREFILL)
    causal, full = (
        next(t for t in family.tasks if t.axes["mask"] == m and t.axes["P"] == 1) for m in ("causal", "full")
    )
    shape = {"B": 16, "Q": 1024, "L": 4096, "lens": "equal"}
    assert family.values(full, shape)["PAIRS"] == 16 * 1024 * 4096
    assert family.values(causal, shape)["PAIRS"] == 16 * (1024 * 4096 - 1024 * 1023 // 2)
    assert family.flops(family.values(causal, shape)) == 4 * 32 * 128 * 16 * (1024 * 4096 - 1024 * 1023 // 2)
    assert [p.name for p in family.launcher.params if p.role == "host"] == [
        "qo_indptr_host",
        "kv_indptr_host",
        "kv_indices_host",
        "kv_last_page_len_host",
    ]


def test_given_lengths_are_checked() -> None:
    """`given:` lengths (a FlashInfer-Trace workload's) are the shape's own: counted, bounded, one per sequence."""
    assert paged.lengths(3, 10, "given:5,1,20") == [5, 1, 20]
    assert paged.decode_counts({"B": 3, "L": 10, "lens": "given:5,1,20"}) == {"TOKENS": 26}
    values = {"B": 2, "Q": 3, "L": 7, "lens": "given:2/4,3/9", "mask": "causal", "P": 1}
    assert paged.query_lengths(values) == ([2, 3], [4, 9])
    assert paged.prefill_counts(values) == {"PAIRS": (8 - 1) + (27 - 3), "ROWS": 5, "TOKENS": 13}
    assert paged.given([(2, 4), (3, 9)]) == "given:2/4,3/9" and paged.given([5, 1, 20]) == "given:5,1,20"
    for batch, lens, why in [
        (3, "given:5,1", "lens 'given:5,1' gives 2 sequences, B is 3"),
        (3, "given:5,0,1", "lens 'given:5,0,1' is not 'given:' and one N (each at least 1) per sequence"),
        (3, "given:5,1,30", "lens 'given:5,1,30' holds 36 tokens, more than B·L = 30"),
        (3, "given:5,1/2,3", "is not 'given:' and one N (each at least 1)"),
    ]:
        with pytest.raises(ValueError) as refused:
            paged.lengths(batch, 10, lens)
        assert why in str(refused.value)
    with pytest.raises(ValueError, match="adds more tokens to a sequence than it holds"):
        paged.query_lengths({**values, "lens": "given:5/4,3/9"})
    with pytest.raises(ValueError, match=r"holds 7 tokens, more than B·Q = 6"):
        paged.query_lengths({**values, "lens": "given:4/4,3/9"})


@pytest.mark.parametrize("page", [1, 64])
def test_page_tables_read_back_as_the_shape_of_their_sequences(page: int) -> None:
    """`shape_of` inverts `tables`: the same sequences, whatever pages hold them."""
    decode = {"B": 32, "L": 2048, "P": page, "lens": "ragged"}
    tables = paged.tables(decode, seed=3)
    if page == 1:
        del tables["kv_last_page_len"]  # a page of one token is full: the fill may be left out
    shape = paged.shape_of(tables, page)
    assert shape == {"B": 32, "L": 2048, "lens": paged.given(paged.lengths(32, 2048, "ragged"))}
    assert paged.tables({**shape, "P": page}, seed=4)["kv_indptr"] == tables["kv_indptr"]
    prefill = {"B": 7, "Q": 300, "L": 1000, "P": page, "lens": "skewed", "mask": "full"}
    queries, totals = paged.query_lengths(prefill)
    made = paged.shape_of(paged.prefill_tables(prefill, seed=3), page)
    assert made == {"B": 7, "Q": 300, "L": 1000, "lens": paged.given(list(zip(queries, totals, strict=True)))}
    with pytest.raises(ValueError, match="does not give each of 2 sequences 1 to its length new tokens"):
        paged.shape_of({"kv_indptr": [0, 2, 4], "kv_last_page_len": [1, 1], "qo_indptr": [0, 200, 201]}, page)


def test_a_shape_may_give_its_lengths_and_its_id_shows_a_digest(tmp_path: Path) -> None:
    data = dict(yaml.safe_load(DECODE.read_text()))
    data["shapes"]["hidden"].append({"B": 3, "L": 10, "lens": "given:5,1,20"})
    data["shapes"]["hidden"].append({"B": 3, "L": 10, "lens": "given:5,1,21"})
    target = tmp_path / DECODE.name
    target.write_text(yaml.safe_dump(data))
    family = load_family(target)
    ids = [s.id for s in family.shapes("hidden")[-2:]]
    assert all(i.startswith("b3-l10-given") and len(i) == len("b3-l10-given") + 8 for i in ids)
    assert ids[0] != ids[1]  # the digest tells the lengths apart
    data["shapes"]["hidden"][-1] = {"B": 3, "L": 10, "lens": "given:5,1,31"}
    target.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskFileError, match="holds 37 tokens, more than B·L = 30"):
        load_family(target)
    data["shapes"]["hidden"][-1] = {"B": 3, "L": 10, "lens": "given:5;1"}
    target.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskFileError, match=r"shapes.hidden\[\d\].lens: not a word: 'given:5;1'"):
        load_family(target)


BROKEN_COUNTS = [
    (lambda d: d["counts"].update(names=["B"]), "counts.names[0]: not a name apart from the axes"),
    (lambda d: d["counts"].update(names=[]), "counts.names: expected names, each once"),
    (lambda d: d.update(flops="4 * H * D * PAIRS2"), "flops: unknown name 'PAIRS2'"),
    (lambda d: d["counts"].update(function="pytest_ptxbench.paged:nothing"), "counts.function: AttributeError"),
    (
        lambda d: d["counts"].update(function="pytest_ptxbench.paged:prefill_tables"),
        "counts.function: TypeError",
    ),
    (
        lambda d: d["shapes"]["hidden"].append({"B": 2, "Q": 50, "L": 50, "lens": "equal"}),
        "counts.function: ValueError: L 50 must exceed Q 50: every sequence has earlier tokens in its cache, for"
        " gqa_paged_prefill-h32-kv8-d128-ps1-causal, on shapes.hidden[4]",
    ),
]


MALFORMED = [(DECODE, change, message) for change, message in BROKEN]
MALFORMED += [(PREFILL, change, message) for change, message in BROKEN_COUNTS]


@pytest.mark.parametrize(
    ("source", "change", "message"), MALFORMED, ids=[f"{s.stem}-{i}" for i, (s, _, _) in enumerate(MALFORMED)]
)
def test_a_malformed_paged_task_file_names_file_field_and_value(
    tmp_path: Path, source: Path, change: Any, message: str
) -> None:
    """Host inputs and counts: a bad one names the file, the field and the value."""
    data = dict(yaml.safe_load(source.read_text()))
    change(data)
    target = tmp_path / source.name
    target.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskFileError) as caught:
        load_family(target)
    assert str(caught.value).startswith(f"{target}: ")
    assert message in str(caught.value)


def test_the_task_card_says_how_page_tables_arrive_and_which_copy_is_required() -> None:
    from pytest_ptxbench.agent.prompts import task_card
    from pytest_ptxbench.languages import LANGUAGES
    from pytest_ptxbench.targets import TARGETS

    family = load_family(DECODE)
    cuda = task_card(family, family.tasks[0], TARGETS["h100"], LANGUAGES["cuda"])
    assert "- kv_indptr_host: the values of kv_indptr as a host array, to plan launches on the host" in cuda
    assert "must contain UBLKCP.S.G or UTMALDG and they must execute" in cuda
    triton = task_card(family, family.tasks[0], TARGETS["h100"], LANGUAGES["triton"])
    assert "- kv_indices_host: the values of kv_indices as a Python list of int" in triton
