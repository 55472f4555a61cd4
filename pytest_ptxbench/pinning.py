"""Several GPUs of one host: one pytest-xdist worker per GPU, pinned before anything starts CUDA.

A worker `gwN` gets the N-th entry (modulo their count) of the caller's own `CUDA_VISIBLE_DEVICES`
(indices, UUIDs or MIG ids, kept as given), or else of the GPUs nvidia-smi lists, by UUID so that CUDA's
device order cannot reorder them. With more workers than GPUs, the GPU stages of one GPU run one worker
at a time (`exclusive`).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .device import Device
from .locks import locked

_WORKER = re.compile(r"^gw(\d+)$")


def worker_index(worker_id: str | None) -> int | None:
    """`gw3` → 3; None outside xdist."""
    m = _WORKER.match(worker_id or "")
    return int(m.group(1)) if m else None


def pinned(index: int, caller_mask: str | None, devices: list[Device]) -> str | None:
    """The `CUDA_VISIBLE_DEVICES` value for worker `index`; None when there is no GPU to pin."""
    entries = (
        [e.strip() for e in caller_mask.split(",") if e.strip()]
        if caller_mask is not None
        else [d.uuid for d in devices]
    )
    return entries[index % len(entries)] if entries else None


def pin_worker(worker_id: str | None, devices: list[Device]) -> str | None:
    """Pin this xdist worker's GPU in the environment the worker's children inherit."""
    index = worker_index(worker_id)
    if index is None:
        return None
    value = pinned(index, os.environ.get("CUDA_VISIBLE_DEVICES"), devices)
    if value is not None:
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # nvidia-smi's order, for index entries
        os.environ["CUDA_VISIBLE_DEVICES"] = value
    return value


@contextmanager
def exclusive(device: Device) -> Iterator[None]:
    """Hold the host-wide lock of one GPU (timing and profiling never share it)."""
    with locked(Path(tempfile.gettempdir(), f"ptxbench-gpu-{device.uuid}.lock")):
        yield
