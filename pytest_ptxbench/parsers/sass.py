"""Per-kernel SASS opcode inventory from `cuobjdump -sass` output.

Only address-anchored instruction lines (`/*0040*/  @!P0 HGMMA.64x256x16.F32.BF16 ... ;`) count: header
text, `.headerflags` and encoding comments may hold opcode-like words and are ignored.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

# `arch = sm_90a` heads each ELF of a fatbin; `code for sm_90a` heads the listing of a cubin too
_ARCH = re.compile(r"^\s*(?:arch\s*=|code for)\s*(sm_\w+)\s*$")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s+([^;]*?)\s*;")
_PREDICATE = re.compile(r"^@!?U?P(?:T|\d+)$")


@dataclass
class Kernel:
    name: str  # mangled, as the cubin's symbol table and ncu name it
    arch: str
    opcodes: Counter[str] = field(default_factory=Counter)  # full mnemonic with modifiers → static count


def parse_sass(text: str) -> dict[str, Kernel]:
    """Kernels by mangled name. A kernel listed twice (one fatbin per build pass) is counted once."""
    kernels: dict[str, Kernel] = {}
    arch = "unknown"
    current: Kernel | None = None
    for line in text.splitlines():
        if m := _ARCH.match(line):
            arch, current = m.group(1), None
        elif m := _FUNCTION.match(line):
            name = m.group(1)
            current = None if name in kernels else kernels.setdefault(name, Kernel(name, arch))
        elif current is not None and (m := _INSTRUCTION.match(line)):
            mnemonic = opcode_of(m.group(2))
            if mnemonic:
                current.opcodes[mnemonic] += 1
    return kernels


def opcode_of(instruction: str) -> str:
    """`@!P0 HGMMA.64x8x16.F32.BF16 R24, gdesc[UR4], R24` → `HGMMA.64x8x16.F32.BF16`."""
    tokens = instruction.split()
    if tokens and _PREDICATE.match(tokens[0]):
        tokens = tokens[1:]
    return tokens[0] if tokens else ""


def matches(pattern: str, mnemonic: str) -> bool:
    """Dot-separated tokens, compared from the left with shell wildcards; extra trailing modifiers
    are allowed; `|` separates alternatives. `HGMMA.*.F32.BF16` matches `HGMMA.64x256x16.F32.BF16`, not
    `HGMMA.64x256x16.F32`; `UTMALDG` matches `UTMALDG.2D`; `UBLKCP.S.G|UTMALDG` matches either."""
    have = mnemonic.split(".")
    for alternative in pattern.split("|"):
        want = alternative.split(".")
        if len(have) >= len(want) and all(fnmatchcase(h, w) for w, h in zip(want, have, strict=False)):
            return True
    return False


def holders(pattern: str, kernels: dict[str, Kernel]) -> dict[str, list[str]]:
    """Kernel name → the mnemonics in it that match `pattern`."""
    found = {k.name: sorted(m for m in k.opcodes if matches(pattern, m)) for k in kernels.values()}
    return {name: mnemonics for name, mnemonics in found.items() if mnemonics}


_WARPGROUP_MMA = re.compile(r"^[HQIB]GMMA\.(\d+)x(\d+)x(\d+)(?:\.|$)")


def tensor_flops(executed: dict[str, int]) -> float | None:
    """FLOPs done by warpgroup MMA instructions, from warp-level executed counts per mnemonic
    (`HGMMA.64x256x16.F32.BF16: n` → n / 4 warps × 2·64·256·16). None when no executed mnemonic names
    its shape (Blackwell's UTCHMMA keeps it in a descriptor)."""
    total, seen = 0.0, False
    for mnemonic, count in executed.items():
        if m := _WARPGROUP_MMA.match(mnemonic):
            seen = True
            rows, cols, depth = (int(g) for g in m.groups())
            total += count / 4 * 2 * rows * cols * depth
    return total if seen else None


# FLOPs per lane of the CUDA cores' floating-point arithmetic (MUFU and conversions not counted).
_SIMT_FLOPS = {"FFMA": 2, "FADD": 1, "FMUL": 1, "FFMA2": 4, "FADD2": 2, "FMUL2": 2, "HFMA2": 4, "HADD2": 2, "HMUL2": 2}
_SIMT_FLOPS |= {"DFMA": 2, "DADD": 1, "DMUL": 1}


def simt_flops(executed: dict[str, int]) -> float:
    """FLOPs done by the CUDA cores, from warp-level executed counts per mnemonic (32 lanes each: an upper
    bound, since inactive lanes count too). `HFMA2.MMA` is left out: ptxas uses it to move constants."""
    return float(
        sum(count * 32 * _SIMT_FLOPS.get(m.split(".")[0], 0) for m, count in executed.items() if m != "HFMA2.MMA")
    )
