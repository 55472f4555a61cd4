"""Instruction counts of each kernel's main loop, from a local sm_90a build: no GPU needed.

    python3 scripts/sass_mainloop.py tasks/reference/h100/attention_fwd.cu --opcode MUFU --least 30
    python3 scripts/sass_mainloop.py tasks/reference/h100/gemm.cu --opcode HGMMA --least 4

Builds the file with nvcc into a cubin, disassembles it with nvdisasm (not in the CPU image's CUDA; the
`nvidia-cuda-nvdisasm` wheel has it: `pip download --no-deps nvidia-cuda-nvdisasm`, unzip, pass --nvdisasm) and,
per kernel, takes the shortest loop (a backward branch and its target) holding at least `least` instructions of
`opcode`. It prints the loop's length and the opcodes that show where the work goes: R2UR against ULOP3/UMOV says
whether wgmma descriptors are built on the uniform datapath (MEASUREMENTS.md, fifteenth session).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

SHOWN = ("HGMMA", "MUFU", "R2UR", "ULOP3", "UMOV", "UIADD3", "LOP3", "IMAD", "SYNCS", "BAR", "BRA")
INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
LABEL = re.compile(r"(\.L_x_\d+):")
BRANCH = re.compile(r"BRA\s+.*?(\.L_x_\d+)")


def opcode(instruction: str) -> str:
    """`@P0 LOP3.LUT R1, ...` -> `LOP3`."""
    words = [w for w in instruction.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else ""


def kernels(listing: str) -> dict[str, str]:
    """nvdisasm's listing split into its `.text.NAME` sections."""
    parts = re.split(r"^\.text\.(\S+):", listing, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def main_loop(section: str, op: str, least: int) -> list[str]:
    """The shortest loop of the section with at least `least` instructions of opcode `op`."""
    code: list[tuple[int, str]] = []
    labels: dict[str, int] = {}
    pending: list[str] = []
    for line in section.splitlines():
        if label := LABEL.match(line):
            pending.append(label.group(1))
        elif instruction := INSTRUCTION.match(line):
            address = int(instruction.group(1), 16)
            labels.update(dict.fromkeys(pending, address))
            pending = []
            code.append((address, instruction.group(2)))
    best: list[str] = []
    for address, text in code:
        branch = BRANCH.search(text)
        if not branch or labels.get(branch.group(1), address) >= address:
            continue
        body = [t for a, t in code if labels[branch.group(1)] <= a <= address]
        if sum(opcode(t) == op for t in body) >= least and (not best or len(body) < len(best)):
            best = body
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("--opcode", default="HGMMA", help="the main loop holds at least --least of these")
    parser.add_argument("--least", type=int, default=1)
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--nvdisasm", default="nvdisasm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        compute = args.arch.replace("sm_", "compute_")
        subprocess.run(
            [
                "nvcc",
                f"-gencode=arch={compute},code={args.arch}",
                "-std=c++17",
                "-O3",
                "-cubin",
                str(args.source),
                "-o",
                str(cubin),
            ],
            check=True,
        )
        listing = subprocess.run([args.nvdisasm, str(cubin)], check=True, capture_output=True, text=True).stdout
    for name, section in kernels(listing).items():
        loop = main_loop(section, args.opcode, args.least)
        counts = Counter(opcode(t) for t in loop)
        shown = " ".join(f"{op}={counts[op]}" for op in SHOWN)
        print(f"{name}\n    main loop {len(loop)} instructions: {shown}" if loop else f"{name}\n    no such loop")


if __name__ == "__main__":
    main()
