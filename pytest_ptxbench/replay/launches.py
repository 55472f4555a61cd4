"""The launch list: what a launcher did under stream capture, as data (format `ptxbench-launches/1`).

Language-neutral: a CUDA launcher and a Triton `run` produce the same thing. Operations run in order on
one stream: kernel launches (by mangled name, with their parameter bytes and, where the capture knows it, the
cubin the kernel came from), memsets and device-to-device
copies within the call's buffers, and uploads (host-to-device copies whose bytes were snapshotted when
they were captured). `problems` says what makes a list unusable for the buffers it was captured at.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .placement import Placement

FORMAT = "ptxbench-launches/1"


@dataclass(frozen=True)
class Kernel:
    name: str  # mangled, as in the cubin
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    params: bytes  # the parameter buffer, each argument at its offset
    attributes: dict[str, Any] = field(default_factory=dict)  # launch attributes by name: cluster, priority...
    # the sha256 of the cubin the kernel came from (Triton builds one per specialisation, each defining the same
    # name); "": whichever of the candidate's cubins defines the name (a CUDA build has one)
    module: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "op": "kernel",
            "name": self.name,
            "grid": list(self.grid),
            "block": list(self.block),
            "shared_bytes": self.shared_bytes,
            "params": self.params.hex(),
            "attributes": self.attributes,
            "module": self.module,
        }


@dataclass(frozen=True)
class Memset:
    """A 2D memset: `height` rows of `width` elements of `element_size` bytes, rows `pitch` bytes apart."""

    dst: int
    value: int
    element_size: int
    width: int
    height: int
    pitch: int

    @property
    def nbytes(self) -> int:
        return (self.height - 1) * self.pitch + self.width * self.element_size

    def to_json(self) -> dict[str, Any]:
        return {"op": "memset", **asdict(self)}


@dataclass(frozen=True)
class Copy:
    """A device-to-device copy of `nbytes`."""

    dst: int
    src: int
    nbytes: int

    def to_json(self) -> dict[str, Any]:
        return {"op": "copy", **asdict(self)}


@dataclass(frozen=True)
class Upload:
    """A host-to-device copy; its bytes as they were when captured."""

    dst: int
    data: bytes

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def to_json(self) -> dict[str, Any]:
        return {"op": "upload", "dst": self.dst, "data": self.data.hex()}


Operation = Kernel | Memset | Copy | Upload


@dataclass(frozen=True)
class LaunchList:
    placement: int  # the index of the placement it was captured at
    operations: tuple[Operation, ...]

    @property
    def kernels(self) -> list[Kernel]:
        return [op for op in self.operations if isinstance(op, Kernel)]

    def outline(self) -> list[dict[str, Any]]:
        """What the call launched, without addresses or contents: each kernel's name, grid, block and cluster
        shape, each memory operation's kind and size (the check verdict's `launches`)."""
        return [
            {
                "op": "kernel",
                "name": op.name,
                "grid": list(op.grid),
                "block": list(op.block),
                "cluster": list(op.attributes.get("cluster", (1, 1, 1))),
            }
            if isinstance(op, Kernel)
            else {"op": type(op).__name__.lower(), "bytes": op.nbytes}
            for op in self.operations
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "placement": self.placement,
            "operations": [op.to_json() for op in self.operations],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> LaunchList:
        """Raises ValueError naming the first malformed field."""
        if raw.get("format") != FORMAT:
            raise ValueError(f"launch list format {raw.get('format')!r}, expected {FORMAT!r}")
        return cls(int(raw["placement"]), tuple(_operation(op) for op in raw["operations"]))

    def problems(self, placement: Placement, writable: set[str]) -> list[str]:
        """What the harness refuses to replay: memory operations outside the call's buffers, writing into a
        buffer the launcher may only read, or a kernel to start early after anything but a kernel."""
        found = []
        for before, op in zip((None, *self.operations), self.operations, strict=False):
            if isinstance(op, Kernel):
                if "programmatic" in op.attributes and not isinstance(before, Kernel):
                    ahead = "the call's start" if before is None else f"a {type(before).__name__.lower()}"
                    found.append(
                        f"{op.name} is to overlap {ahead}; only a kernel may be overlapped (programmatic launch)"
                    )
                continue
            what = type(op).__name__.lower()
            target = placement.owner(op.dst, op.nbytes)
            if target is None:
                found.append(f"a {what} writes {op.nbytes} bytes at {op.dst:#x}, outside the call's buffers")
            elif target.name not in writable:
                found.append(f"a {what} writes into {target.name}, which the launcher may only read")
            if isinstance(op, Copy) and placement.owner(op.src, op.nbytes) is None:
                found.append(f"a copy reads {op.nbytes} bytes at {op.src:#x}, outside the call's buffers")
        return found


def _triple(raw: Any, what: str) -> tuple[int, int, int]:
    values = tuple(int(v) for v in raw)
    if len(values) != 3 or min(values) < 1:
        raise ValueError(f"{what} {raw!r}: expected three positive integers")
    return values[0], values[1], values[2]


def _operation(raw: dict[str, Any]) -> Operation:
    op = raw.get("op")
    if op == "kernel":
        return Kernel(
            str(raw["name"]),
            _triple(raw["grid"], "grid"),
            _triple(raw["block"], "block"),
            int(raw["shared_bytes"]),
            bytes.fromhex(raw["params"]),
            dict(raw.get("attributes", {})),
            str(raw.get("module", "")),
        )
    if op == "memset":
        return Memset(*(int(raw[k]) for k in ("dst", "value", "element_size", "width", "height", "pitch")))
    if op == "copy":
        return Copy(int(raw["dst"]), int(raw["src"]), int(raw["nbytes"]))
    if op == "upload":
        return Upload(int(raw["dst"]), bytes.fromhex(raw["data"]))
    raise ValueError(f"unknown operation {op!r} in a launch list")
