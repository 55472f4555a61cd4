"""Host side of a shared object, from binutils' `objdump`: dynamic symbols, needed libraries, and
the instructions of its executable sections."""

from __future__ import annotations

import re
from dataclasses import dataclass

_SYMBOL = re.compile(r"^[0-9a-fA-F]{8,}\s+(?P<flags>.{7})\s+(?P<section>\S+)\s+[0-9a-fA-F]+\s+(?P<rest>.+)$")
_NEEDED = re.compile(r"^\s*NEEDED\s+(\S+)\s*$")
_FUNCTION = re.compile(r"^[0-9a-fA-F]+ <(?P<name>[^>]+)>:\s*$")
_INSTRUCTION = re.compile(r"^\s*[0-9a-fA-F]+:\s+(?P<mnemonic>[a-z][\w.]*)(?:\s+(?P<operands>.*))?$")


@dataclass(frozen=True)
class DynamicSymbol:
    name: str
    section: str  # "*UND*" for an import
    version: str  # "(GLIBC_2.2.5)", "Base" or ""
    function: bool

    @property
    def undefined(self) -> bool:
        return self.section == "*UND*"


def parse_dynamic_symbols(text: str) -> list[DynamicSymbol]:
    """`objdump -T` → dynamic symbols."""
    out = []
    for line in text.splitlines():
        m = _SYMBOL.match(line)
        if not m:
            continue
        *version, name = m.group("rest").split()
        out.append(DynamicSymbol(name, m.group("section"), " ".join(version), "F" in m.group("flags")))
    return out


def parse_needed(text: str) -> list[str]:
    """`objdump -p` → the DT_NEEDED libraries."""
    return [m.group(1) for line in text.splitlines() if (m := _NEEDED.match(line))]


@dataclass(frozen=True)
class HostInstruction:
    function: str
    mnemonic: str
    operands: str


def find_instructions(text: str, mnemonics: set[str]) -> list[HostInstruction]:
    """`objdump -d` → the instructions whose mnemonic is in `mnemonics`, with the function holding them."""
    function = "?"
    found = []
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            function = m.group("name")
        elif (m := _INSTRUCTION.match(line)) and m.group("mnemonic") in mnemonics:
            found.append(HostInstruction(function, m.group("mnemonic"), (m.group("operands") or "").strip()))
    return found
