"""Where the buffers of one call live: the same virtual addresses in the capture child and the runner.

Each buffer gets a reservation of its own: one unmapped granule before the mapping, the mapping, and a
long unmapped tail. The buffer ends where its mapping ends (its start aligned down to 256 bytes), so a
write past the end faults at any distance; the few bytes of slack after it and the mapped bytes before it
are canaries. Addresses are drawn from a secret per-run seed, so no launcher can guess them.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass
from typing import Any

GRANULE = 2 << 20  # the H200's allocation granularity; the children check theirs against it
ALIGN = 256  # every buffer's start: enough for TMA (16 B) and vector access
TAIL = 16 << 30  # unmapped address space after each mapping
# Reservations start on this boundary: the driver moves a requested address up to a coarser boundary than
# the granule for large ranges (seen on the H200: 32 MiB), and a moved reservation is refused.
RESERVE_ALIGN = 1 << 30
# Where reservations are drawn: far above the heap and below the libraries' mappings on x86-64 Linux.
LOW, HIGH = 0x2000_0000_0000, 0x6000_0000_0000
CANARY = 0xA5


@dataclass(frozen=True)
class Buffer:
    """One buffer of a call at one placement."""

    name: str
    nbytes: int
    reserve: int  # the reservation's start (an unmapped granule)
    reserve_bytes: int
    mapped: int  # the mapping's start
    mapped_bytes: int
    pointer: int  # what the launcher is given; pointer + nbytes <= mapped + mapped_bytes

    @property
    def end(self) -> int:
        return self.pointer + self.nbytes

    @property
    def slack_before(self) -> int:
        return self.pointer - self.mapped

    @property
    def slack_after(self) -> int:
        return self.mapped + self.mapped_bytes - self.end

    def holds(self, start: int, nbytes: int) -> bool:
        return self.pointer <= start and start + nbytes <= self.end


@dataclass(frozen=True)
class Placement:
    """Every buffer of one call, by name, at addresses drawn for this placement."""

    index: int
    buffers: dict[str, Buffer]

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "buffers": [asdict(b) for b in self.buffers.values()]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Placement:
        buffers = [Buffer(**b) for b in raw["buffers"]]
        return cls(int(raw["index"]), {b.name: b for b in buffers})

    def owner(self, start: int, nbytes: int) -> Buffer | None:
        """The buffer that holds [start, start + nbytes), if one does."""
        return next((b for b in self.buffers.values() if b.holds(start, nbytes)), None)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def place(sizes: dict[str, int], count: int, draw: secrets.SystemRandom | None = None) -> tuple[Placement, ...]:
    """`count` placements of buffers of the given sizes, every buffer in a reservation of its own that overlaps
    no other (the placements of one call are mapped in one process)."""
    draw = draw or secrets.SystemRandom()
    taken: list[tuple[int, int]] = []
    placements = []
    for index in range(count):
        buffers: dict[str, Buffer] = {}
        for name, nbytes in sizes.items():
            mapped_bytes = _round_up(max(nbytes, 1) + ALIGN, GRANULE)
            reserve_bytes = _round_up(GRANULE + mapped_bytes + TAIL, RESERVE_ALIGN)
            while True:
                reserve = LOW + draw.randrange((HIGH - LOW - reserve_bytes) // RESERVE_ALIGN) * RESERVE_ALIGN
                if all(reserve + reserve_bytes <= a or b <= reserve for a, b in taken):
                    break
            taken.append((reserve, reserve + reserve_bytes))
            mapped = reserve + GRANULE
            pointer = (mapped + mapped_bytes - nbytes) // ALIGN * ALIGN
            buffers[name] = Buffer(name, nbytes, reserve, reserve_bytes, mapped, mapped_bytes, pointer)
        placements.append(Placement(index, buffers))
    return tuple(placements)


class Relocated(RuntimeError):
    """The driver would not reserve an address (something of its own holds it): the harness draws other
    addresses and captures again. A child's reply names this class (`error_type`)."""
