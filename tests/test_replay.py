"""The data of trusted replay, on CPU: buffer placements, launch lists and what the harness refuses to replay,
and the secret recheck schedule. The capture child and the runner themselves run in tests/test_gpu.py."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from pytest_ptxbench.child.serving import answer
from pytest_ptxbench.replay.capturing import CaptureFailed, Own, validated
from pytest_ptxbench.replay.launches import Copy, Kernel, LaunchList, Memset, Upload
from pytest_ptxbench.replay.placement import ALIGN, GRANULE, RESERVE_ALIGN, TAIL, Placement, Relocated, place
from pytest_ptxbench.replay.timer import RECHECKS, recheck_schedule

SIZES = {"A": 256 * 2048 * 2, "B": 128 * 2048 * 2, "C": 256 * 128 * 2 + 6, "workspace": 0}


def test_every_buffer_ends_where_its_mapping_ends() -> None:
    (placement,) = place(SIZES, 1)
    spans = []
    for name, b in placement.buffers.items():
        assert b.nbytes == SIZES[name]
        assert b.reserve % RESERVE_ALIGN == 0 and b.reserve_bytes % RESERVE_ALIGN == 0
        assert b.mapped == b.reserve + GRANULE  # an unmapped granule before the mapping
        assert b.mapped_bytes % GRANULE == 0
        assert b.pointer % ALIGN == 0 and b.pointer >= b.mapped
        assert 0 <= b.slack_after < ALIGN  # the buffer's end is within one alignment of the mapping's end
        assert b.reserve + b.reserve_bytes - (b.mapped + b.mapped_bytes) >= TAIL  # unmapped space after it
        spans.append((b.reserve, b.reserve + b.reserve_bytes))
    spans.sort()
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), "reservations overlap"
    assert placement.buffers["A"].slack_after == 0  # a whole number of 256-byte blocks: not one byte of slack


def test_placements_are_drawn_anew_and_travel_as_json() -> None:
    first, second = place(SIZES, 2)
    spans = sorted((b.reserve, b.reserve + b.reserve_bytes) for p in (first, second) for b in p.buffers.values())
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), "placements overlap"
    assert (first.index, second.index) == (0, 1)
    assert {b.pointer for b in first.buffers.values()}.isdisjoint(b.pointer for b in second.buffers.values())
    assert Placement.from_json(first.to_json()) == first
    c = first.buffers["C"]
    assert first.owner(c.pointer, c.nbytes) == c
    assert first.owner(c.pointer, c.nbytes + 1) is None


def _kernel(name: str = "_Z4gemmv") -> Kernel:
    return Kernel(name, (2, 1, 1), (128, 1, 1), 1024, bytes(range(24)), {"cluster": [2, 1, 1]})


def test_launch_lists_round_trip_and_name_what_is_malformed() -> None:
    (placement,) = place(SIZES, 1)
    c = placement.buffers["C"]
    ops = (Memset(c.pointer, 0, 1, c.nbytes, 1, 0), _kernel(), Copy(c.pointer, c.pointer, 4), Upload(c.pointer, b"ab"))
    launches = LaunchList(0, ops)
    assert LaunchList.from_json(launches.to_json()) == launches
    assert launches.kernels == [ops[1]]
    from_one_cubin = LaunchList(0, (dataclasses.replace(_kernel(), module="ab12"),))  # a Triton specialisation
    assert LaunchList.from_json(from_one_cubin.to_json()) == from_one_cubin
    with pytest.raises(ValueError, match="launch list format 'other/1'"):
        LaunchList.from_json({**launches.to_json(), "format": "other/1"})
    raw = launches.to_json()
    raw["operations"][1]["grid"] = [0, 1, 1]
    with pytest.raises(ValueError, match=r"grid \[0, 1, 1\]: expected three positive integers"):
        LaunchList.from_json(raw)
    raw["operations"][1] = {"op": "host"}
    with pytest.raises(ValueError, match="unknown operation 'host'"):
        LaunchList.from_json(raw)


def test_the_outline_shows_how_a_call_launched_and_nothing_it_touched() -> None:
    (placement,) = place(SIZES, 1)
    c = placement.buffers["C"]
    plain = dataclasses.replace(_kernel("_Z5otherv"), attributes={})
    ops = (Memset(c.pointer, 0, 4, 6, 3, 64), _kernel(), plain, Copy(c.pointer, c.pointer, 4), Upload(c.pointer, b"ab"))
    assert LaunchList(0, ops).outline() == [
        {"op": "memset", "bytes": 2 * 64 + 6 * 4},
        {"op": "kernel", "name": "_Z4gemmv", "grid": [2, 1, 1], "block": [128, 1, 1], "cluster": [2, 1, 1]},
        {"op": "kernel", "name": "_Z5otherv", "grid": [2, 1, 1], "block": [128, 1, 1], "cluster": [1, 1, 1]},
        {"op": "copy", "bytes": 4},
        {"op": "upload", "bytes": 2},
    ]


def test_what_the_harness_refuses_to_replay() -> None:
    placements = place(SIZES, 2)
    a, c = placements[0].buffers["A"], placements[0].buffers["C"]
    good = tuple(LaunchList(p.index, (_kernel(),)) for p in placements)
    own = Own(frozenset({"_Z4gemmv"}), frozenset({"ab12"}))
    assert validated(good, placements, {"A", "B"}, own).kernels == {"_Z4gemmv"}
    early = dataclasses.replace(_kernel(), attributes={"programmatic": 1})  # a programmatic dependent launch
    assert (
        validated((LaunchList(0, (_kernel(), early)), good[1]), placements, {"A", "B"}, own).lists[0].kernels[1]
        == early
    )
    from_a_built_cubin = dataclasses.replace(_kernel(), module="ab12")
    assert (
        validated((LaunchList(0, (from_a_built_cubin,)), good[1]), placements, {"A", "B"}, own).lists[0].kernels[0]
        == from_a_built_cubin
    )
    cases = {
        "a memset writes into A, which the launcher may only read": (Memset(a.pointer, 0, 1, 16, 1, 0), _kernel()),
        f"a memset writes {c.nbytes + 2} bytes at {c.pointer:#x}, outside the call's buffers": (
            Memset(c.pointer, 0, 2, c.nbytes // 2 + 1, 1, 0),
            _kernel(),
        ),
        f"a copy reads 8 bytes at {c.end:#x}, outside the call's buffers": (Copy(c.pointer, c.end, 8), _kernel()),
        "the launcher launched no kernel (placement 0)": (),
        "_Z4gemmv is to overlap the call's start; only a kernel may be overlapped (programmatic launch)": (early,),
        "_Z4gemmv is to overlap a memset; only a kernel may be overlapped (programmatic launch)": (
            _kernel(),
            Memset(c.pointer, 0, 1, 16, 1, 0),
            early,
        ),
        "kernels not in the candidate's own module were launched: nvjet_sm90_tst": (_kernel("nvjet_sm90_tst"),),
        "_Z4gemmv ran from code the build did not produce (a specialisation compiled only when run on the GPU, or a"
        " module loaded by the candidate)": (dataclasses.replace(_kernel(), module="cd34"),),
    }
    for message, ops in cases.items():
        lists = (LaunchList(0, ops), good[1])
        with pytest.raises(CaptureFailed) as refused:
            validated(lists, placements, {"A", "B"}, own)
        assert str(refused.value) == message
    with pytest.raises(CaptureFailed, match="one launch list per placement"):
        validated(good[:1], placements, {"A", "B"}, own)


def test_the_rechecked_runs_are_secret_and_enough() -> None:
    drawn = [recheck_schedule(10, 50) for _ in range(5)]
    for schedule in drawn:
        assert len(schedule) == RECHECKS and all(10 <= i < 60 for i in schedule)
    assert len(set(drawn)) > 1  # two equal draws of 10 of 50 runs: odds of 1 in 10^10
    assert recheck_schedule(3, 4) == frozenset({3, 4, 5, 6})  # fewer runs than rechecks: every run
    # a kernel wrong on half of 50 runs escapes 10 rechecks with probability C(25,10) / C(50,10) < 0.1%
    from math import comb

    assert comb(25, RECHECKS) / comb(50, RECHECKS) < 1e-3


def test_a_relocation_travels_as_its_type_not_its_words() -> None:
    """The harness captures again only when a child's reply names the Relocated type; an error that merely
    quotes the driver's words is an ordinary failure."""

    def relocated(request: dict[str, object]) -> dict[str, object]:
        raise Relocated("the driver reserved 0x7f0000000000 instead of 0x200000000000 for A")

    def quoting(request: dict[str, object]) -> dict[str, object]:
        raise RuntimeError("the driver reserved nothing: the launcher failed")

    reply, fatal = answer(relocated, {"op": "load"}, (RuntimeError,))
    assert (reply["ok"], reply["error_type"], fatal) == (False, "Relocated", True)
    reply, fatal = answer(quoting, {"op": "load"}, (RuntimeError,))
    assert (reply["error_type"], fatal) == ("RuntimeError", True)
