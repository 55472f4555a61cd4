"""Capturing one candidate's launches for one shape: the language's capture child (sandboxed) calls the
candidate's entry point at two buffer placements; the harness validates what came back before anything is
replayed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..dtypes import DTYPES
from ..workers import Child, ChildFailed, Sandbox, child_environment
from .launches import LaunchList
from .placement import Placement, Relocated, place

POISON = 0xFF  # what the capture child's buffers hold: never task data
PLACEMENTS = 2


@dataclass(frozen=True)
class Captured:
    """What a launcher does at each placement, checked against the candidate's own kernels."""

    placements: tuple[Placement, ...]
    lists: tuple[LaunchList, ...]

    @property
    def kernels(self) -> frozenset[str]:
        return frozenset(k.name for launches in self.lists for k in launches.kernels)

    def to_load(self) -> dict[str, Any]:
        return {"placements": [p.to_json() for p in self.placements], "launches": [x.to_json() for x in self.lists]}


class CaptureFailed(Exception):
    """The launcher's launches cannot be replayed; the message says what was found. `relocated`: the driver
    would not reserve a drawn address (capture again at others)."""

    def __init__(self, message: str, relocated: bool = False) -> None:
        super().__init__(message)
        self.relocated = relocated


def buffer_sizes(params: Sequence[Mapping[str, Any]], workspace_bytes: int) -> dict[str, int]:
    sizes = {}
    for p in params:
        if p["role"] in ("input", "output"):
            n = DTYPES[p["dtype"]].itemsize
            for dim in p["shape"]:
                n *= dim
            sizes[p["name"]] = n
    sizes["workspace"] = workspace_bytes
    return sizes


@dataclass(frozen=True)
class Own:
    """What the build produced: the kernels' names and the cubins' sha256."""

    kernels: frozenset[str]
    cubins: frozenset[str]


def capture(
    child_module: str,
    request: dict[str, Any],
    sizes: dict[str, int],
    own: Own,
    folder: Path,
    sandbox: Sandbox,
    timeout: float,
) -> Captured:
    """`child_module`: the language's capture child; `request`: the host file, its entry point, the
    parameters and cudart. Raises CaptureFailed."""
    placements = place(sizes, PLACEMENTS)
    env = child_environment(folder, {"CUDA_MODULE_LOADING": "EAGER"})  # no module loads inside the capture
    child = Child(child_module, folder, env, prefix=sandbox.prefix)
    try:
        reply = child.request(
            {**request, "op": "capture", "placements": [p.to_json() for p in placements], "poison": POISON}, timeout
        )
    except ChildFailed as exc:
        raise CaptureFailed(f"capturing the launch: {exc}") from None
    finally:
        child.close()
    if not reply["ok"]:
        raise CaptureFailed(reply["error"], relocated=reply.get("error_type") == Relocated.__name__)
    try:
        lists = tuple(LaunchList.from_json(raw) for raw in reply["launches"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CaptureFailed(f"the capture child's launch list is malformed: {exc}") from None
    return validated(lists, placements, set(request["inputs"]), own)


def validated(lists: tuple[LaunchList, ...], placements: tuple[Placement, ...], inputs: set[str], own: Own) -> Captured:
    """The launch lists the harness agrees to replay; CaptureFailed names everything it refuses."""
    if [x.placement for x in lists] != [p.index for p in placements]:
        raise CaptureFailed("the capture child did not return one launch list per placement")
    problems: list[str] = []
    for launches, placement in zip(lists, placements, strict=True):
        if not launches.kernels:
            problems.append(f"the launcher launched no kernel (placement {placement.index})")
        problems += launches.problems(placement, set(placement.buffers) - inputs)
        foreign = sorted({k.name for k in launches.kernels} - own.kernels)
        if foreign:
            problems.append(f"kernels not in the candidate's own module were launched: {', '.join(foreign[:5])}")
        elsewhere = sorted({k.name for k in launches.kernels if k.module and k.module not in own.cubins})
        if elsewhere:
            problems.append(
                f"{', '.join(elsewhere[:5])} ran from code the build did not produce (a specialisation compiled only"
                " when run on the GPU, or a module loaded by the candidate)"
            )
    if problems:
        raise CaptureFailed("; ".join(dict.fromkeys(problems)))
    return Captured(placements, lists)
