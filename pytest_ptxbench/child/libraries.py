"""Libraries a baseline needs beyond torch (a task file's `requires:`). The trusted child imports them
before anything is timed: their versions go into the results, and a missing one skips the timing of
the tests that need it, saying how to get it; never a fallback to another baseline."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from types import ModuleType

HOW_TO_GET = {
    "flashinfer": "pip install flashinfer-python==0.6.14 apache-tvm-ffi==0.1.15.post2 "
    "nvidia-cudnn-frontend==1.32.0 cuda-tile==1.7.0 (where no registry is reachable: their wheels in .whl, see README)",
}


class Unavailable(RuntimeError):
    """A library a baseline needs cannot be imported in this Python."""


def load(name: str) -> ModuleType:
    """Import `name`, or raise Unavailable with the reason and how to get it."""
    try:
        return importlib.import_module(name)
    except (ImportError, OSError) as exc:
        how = HOW_TO_GET.get(name, f"install the package that provides {name!r}")
        raise Unavailable(f"{name} cannot be imported ({type(exc).__name__}: {exc}); {how}") from exc


def versions(names: Iterable[str]) -> dict[str, str]:
    """Each library's `__version__` ("unknown" where it has none); Unavailable on the first that is missing."""
    return {name: str(getattr(load(name), "__version__", "unknown")) for name in names}
