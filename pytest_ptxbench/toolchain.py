"""Finding the CUDA tools. Every tool is looked for in the same order, so that nvcc, cuobjdump and nvdisasm
come from one toolkit wherever that toolkit has them all:

1. `$CUDA_HOME/bin` (or `$CUDA_PATH/bin`): a toolkit chosen on purpose;
2. NVIDIA's wheels in this Python environment (`site-packages/nvidia/cu13/bin`, the `toolchain` extra);
3. `PATH`;
4. `/usr/local/cuda/bin`, a toolkit's usual home.

A tool the first toolkit lacks (ncu and compute-sanitizer have no wheel) comes from the next place that
has it; `release_warning` says when the CUDA tools found belong to different releases.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("nvcc", "cuobjdump", "nvdisasm", "ncu", "compute-sanitizer")
RELEASE_TOOLS = ("nvcc", "cuobjdump", "nvdisasm")  # one CUDA release each: their versions should agree
# The CUDA runtime candidates link (by this name, from nvcc's own toolkit: wheels ship no `libcudart.so`).
RUNTIME_LIBRARY = "libcudart.so.13"
DEFAULT_HOME = Path("/usr/local/cuda")


@dataclass(frozen=True)
class Tool:
    name: str
    path: Path
    origin: str  # "CUDA_HOME", "wheel", "PATH" or "default" (/usr/local/cuda)

    @functools.cached_property
    def version(self) -> str:
        """`13.0.88`-style release of the tool, or "unknown"."""
        try:
            out = subprocess.run(
                [str(self.path), "--version"], capture_output=True, text=True, errors="replace", timeout=30
            ).stdout
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        found = re.findall(r"\bV(\d+\.\d+\.\d+)|Version (\d[\d.]*)", out)
        return next((a or b for a, b in reversed(found)), "unknown")

    def env(self) -> dict[str, str]:
        """The environment to run it with: its own folder first on PATH (cuobjdump finds nvdisasm)."""
        return {**os.environ, "PATH": f"{self.path.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def find_tool(name: str) -> Tool | None:
    """The first `name` in the search order of this module's docstring."""
    for origin, folder in _bin_folders():
        if _is_exe(folder / name):
            return Tool(name, folder / name, origin)
    return None


def _toolkit_homes() -> list[tuple[str, Path]]:
    """(origin, toolkit folder) of `$CUDA_HOME` and the installed NVIDIA wheels, in search order."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    homes = [("CUDA_HOME", Path(cuda_home))] if cuda_home else []
    wheels = dict.fromkeys(Path(entry, "nvidia", "cu13") for entry in sys.path if entry)
    return homes + [("wheel", home) for home in wheels if home.is_dir()]


def _bin_folders() -> list[tuple[str, Path]]:
    on_path = [("PATH", Path(entry or ".")) for entry in os.environ.get("PATH", os.defpath).split(os.pathsep)]
    return [(origin, home / "bin") for origin, home in _toolkit_homes()] + on_path + [("default", DEFAULT_HOME / "bin")]


def _is_exe(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def release_warning(versions: Mapping[str, str]) -> str | None:
    """For {tool: version} of the RELEASE_TOOLS found: a warning when they come from different CUDA releases
    (major.minor; patch levels differ within one release), else None."""
    releases = {name: ".".join(v.split(".")[:2]) for name, v in versions.items() if v != "unknown"}
    if len(set(releases.values())) < 2:
        return None
    found = ", ".join(f"{name} {versions[name]}" for name in releases)
    return f"the CUDA tools come from different releases ({found}): use one toolkit that has them all (CUDA_HOME or the toolchain extra)"


def describe(tools: Mapping[str, Tool | None]) -> str:
    """`nvcc 13.5.37, cuobjdump 13.5.37 (wheel, /…/nvidia/cu13/bin); ncu not found`: each tool's version, and
    where it came from, once per folder."""
    groups: dict[tuple[str, Path] | None, list[str]] = {}
    for name, tool in tools.items():
        key = (tool.origin, tool.path.parent) if tool else None
        groups.setdefault(key, []).append(f"{name} {tool.version}" if tool else name)
    return "; ".join(
        f"{', '.join(names)} ({key[0]}, {key[1]})" if key else f"{', '.join(names)} not found"
        for key, names in groups.items()
    )


def driver_library() -> Path | None:
    """libcuda.so where a driver is installed (GPU machines); None on CPU machines."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, errors="replace", timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        name, _, target = line.strip().partition(" => ")
        if name.startswith("libcuda.so") and Path(target).exists():
            return Path(target)
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"):
        for candidate in sorted(Path(folder).glob("libcuda.so*")):
            return candidate
    return None


def find_library(name: str) -> Path | None:
    """A CUDA library (`libcudart.so.13`) under `$CUDA_HOME`, in an installed NVIDIA wheel, or in
    `/usr/local/cuda`: the tools' order, without `PATH`."""
    homes = [home for _, home in _toolkit_homes()] + [DEFAULT_HOME]
    folders = [home / sub for home in homes for sub in ("lib64", "lib")]
    return next((folder / name for folder in folders if (folder / name).is_file()), None)
