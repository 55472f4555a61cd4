"""flashinfer-bench's own data layer (its pydantic models and `TraceSet.from_path`), for checking exported trees.

flashinfer-bench's package `__init__` imports torch and flashinfer, and `flashinfer_bench.data`'s imports
`trace_set.py`, which imports torch and safetensors.torch at the top; the models need only pydantic. So the
two packages are registered as bare module objects whose `__path__` is the installed folder: their
submodules then import without running either `__init__`. `TraceSet.from_path` runs in a child process
where empty stand-ins for `torch` and `safetensors.torch`, when absent, satisfy those imports (loading a
tree calls neither); this process's `sys.modules` never holds a fake torch.

Install it without its dependencies (torch, flashinfer-python, tvm-ffi):
`pip install --no-deps flashinfer-bench==0.1.2` (pydantic comes with the `models` extra's SDKs).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

INSTALL = "flashinfer-bench is not installed: pip install --no-deps flashinfer-bench==0.1.2"


def package_folder() -> Path | None:
    """The installed flashinfer_bench folder, found without importing the package."""
    registered = sys.modules.get("flashinfer_bench")
    if registered is not None:
        return Path(next(iter(registered.__path__)))
    spec = importlib.util.find_spec("flashinfer_bench")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def register_bare_packages(folder: Path) -> None:
    """`flashinfer_bench` and `flashinfer_bench.data` as empty packages over `folder` (see the module doc)."""
    for name, path in (("flashinfer_bench", folder), ("flashinfer_bench.data", folder / "data")):
        if name not in sys.modules:
            module = types.ModuleType(name)
            module.__path__ = [str(path)]
            sys.modules[name] = module


def models() -> types.SimpleNamespace:
    """The model classes: Definition, Solution, Trace, Workload (importing pydantic, never torch)."""
    folder = package_folder()
    assert folder is not None, INSTALL
    register_bare_packages(folder)
    found = {}
    for module, name in (("definition", "Definition"), ("solution", "Solution"), ("trace", "Trace")):
        found[name] = getattr(importlib.import_module(f"flashinfer_bench.data.{module}"), name)
    found["Workload"] = importlib.import_module("flashinfer_bench.data.workload").Workload
    return types.SimpleNamespace(**found)


CHILD = """
import importlib.util, json, sys, types
from pathlib import Path

folder, root = Path(sys.argv[1]), sys.argv[2]
for name, path in (("flashinfer_bench", folder), ("flashinfer_bench.data", folder / "data")):
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module
# stand-ins where absent: trace_set.py imports torch and safetensors.torch, from_path uses neither
no_torch = importlib.util.find_spec("torch") is None
if no_torch:
    sys.modules["torch"] = types.ModuleType("torch")
if importlib.util.find_spec("safetensors") is None:
    sys.modules["safetensors"] = types.ModuleType("safetensors")
    sys.modules["safetensors.torch"] = types.ModuleType("safetensors.torch")
elif no_torch:  # the real safetensors.torch needs the real torch
    sys.modules["safetensors.torch"] = types.ModuleType("safetensors.torch")
from flashinfer_bench.data.trace_set import TraceSet

trace_set = TraceSet.from_path(root)
print(json.dumps(trace_set.to_dict()))
"""


def trace_set(root: Path) -> dict[str, Any]:
    """`TraceSet.from_path(root).to_dict()`, computed by flashinfer-bench in a child process."""
    folder = package_folder()
    assert folder is not None, INSTALL
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), str(root)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"TraceSet.from_path({root}) failed:\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    return result
