"""Resource figures per kernel from `ptxas -v` (registers, shared memory, stack, spills): feedback
for the model and the human, never a verdict."""

from __future__ import annotations

import re

_ENTRY = re.compile(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?")
_FIGURES = {
    "registers": re.compile(r"Used (\d+) registers"),
    "smem_bytes": re.compile(r"(\d+) bytes smem"),
    "stack_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
}


def parse_resources(log: str) -> dict[str, dict[str, int]]:
    """Kernel → {registers, smem_bytes, stack_bytes, spill_store_bytes, spill_load_bytes}."""
    out: dict[str, dict[str, int]] = {}
    kernel = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            kernel = m.group(1)
            out.setdefault(kernel, {})
        if kernel is None:
            continue
        for key, pattern in _FIGURES.items():
            if m := pattern.search(line):
                out[kernel][key] = int(m.group(1))
    return out


def warnings(log: str) -> list[str]:
    """ptxas warnings (e.g. setmaxnreg ignored, C7508), for the feedback."""
    return [line.strip() for line in log.splitlines() if line.lstrip().startswith("ptxas warning")]
