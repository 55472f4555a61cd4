"""Finding the CUDA tools, one by one: `$CUDA_HOME/bin`, then `PATH`, then NVIDIA's PyPI wheels, then
the toolkit's usual home `/usr/local/cuda`."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("nvcc", "cuobjdump", "nvdisasm", "ncu", "compute-sanitizer")
# Where NVIDIA's wheels put their binaries inside site-packages (CUDA 13 and 12 layouts).
_WHEEL_BIN_DIRS = ("nvidia/cu13/bin", "nvidia/cuda_nvcc/bin", "nvidia/cuda_cuobjdump/bin", "nvidia/cuda_nvdisasm/bin")


@dataclass(frozen=True)
class Tool:
    name: str
    path: Path
    origin: str  # "CUDA_HOME", "PATH", "wheel" or "default"

    @functools.cached_property
    def version(self) -> str:
        """`13.0.88`-style release of the tool, or "unknown"."""
        try:
            out = subprocess.run([str(self.path), "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return "unknown"
        found = re.findall(r"\bV(\d+\.\d+\.\d+)|Version (\d[\d.]*)", out)
        return next((a or b for a, b in reversed(found)), "unknown")

    def env(self) -> dict[str, str]:
        """The environment to run it with: its own folder first on PATH (cuobjdump finds nvdisasm)."""
        return {**os.environ, "PATH": f"{self.path.parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def find_tool(name: str) -> Tool | None:
    """The first `name` found under `$CUDA_HOME/bin`, on `PATH`, in an installed NVIDIA wheel, or in
    `/usr/local/cuda/bin`."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and _is_exe(Path(cuda_home, "bin", name)):
        return Tool(name, Path(cuda_home, "bin", name), "CUDA_HOME")
    on_path = shutil.which(name)
    if on_path:
        return Tool(name, Path(on_path), "PATH")
    for entry in sys.path:
        for sub in _WHEEL_BIN_DIRS:
            candidate = Path(entry or ".", sub, name)
            if _is_exe(candidate):
                return Tool(name, candidate, "wheel")
    default = Path("/usr/local/cuda/bin", name)
    return Tool(name, default, "default") if _is_exe(default) else None


def _is_exe(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def driver_library() -> Path | None:
    """libcuda.so where a driver is installed (GPU machines); None on CPU machines."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
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


_WHEEL_LIB_DIRS = ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib")


def find_library(name: str) -> Path | None:
    """A CUDA library (`libcudart.so.13`) under `$CUDA_HOME`, in an installed NVIDIA wheel, or in
    `/usr/local/cuda`."""
    folders = []
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        folders += [Path(cuda_home, "lib64"), Path(cuda_home, "lib")]
    folders += [Path(entry or ".", sub) for entry in sys.path for sub in _WHEEL_LIB_DIRS]
    folders += [Path("/usr/local/cuda/lib64"), Path("/usr/local/cuda/lib")]
    return next((folder / name for folder in folders if (folder / name).is_file()), None)
