"""GPUs on this host, found through nvidia-smi so that nothing starts CUDA in the pytest process."""

from __future__ import annotations

import csv
import io
import os
import shutil
from dataclasses import dataclass

from . import process
from .targets import Target

QUERY = "index,name,compute_cap,driver_version,uuid,pci.bus_id"
# Clocks and power as found (the harness never changes them), recorded beside each run's results.
CLOCKS = "index,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit"


@dataclass(frozen=True)
class Device:
    index: int  # nvidia-smi's index (PCI order)
    name: str
    capability: tuple[int, int]
    driver: str
    uuid: str
    pci_bus_id: str

    @property
    def arch(self) -> str:
        return "sm_{}{}".format(*self.capability)


def parse_devices(text: str) -> list[Device]:
    """`nvidia-smi --query-gpu=<QUERY> --format=csv,noheader` → devices."""
    devices = []
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if len(row) != 6:
            continue
        index, name, cap, driver, uuid, bus = (cell.strip() for cell in row)
        major, _, minor = cap.partition(".")
        devices.append(Device(int(index), name, (int(major), int(minor or 0)), driver, uuid, bus))
    return devices


def detect_devices(timeout: float = 30) -> list[Device]:
    """The devices CUDA would show this process: nvidia-smi's list filtered by `CUDA_VISIBLE_DEVICES`."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    done = process.run([smi, f"--query-gpu={QUERY}", "--format=csv,noheader"], timeout)
    devices = parse_devices(done.stdout) if done.returncode == 0 else []
    return visible(devices, os.environ.get("CUDA_VISIBLE_DEVICES"))


def parse_clocks(text: str) -> dict[str, dict[str, str]]:
    """`nvidia-smi --query-gpu=<CLOCKS> --format=csv` → {index: {field name as nvidia-smi prints it: value}}."""
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    if not rows:
        return {}
    header = [name.strip() for name in rows[0]]
    return {
        row[0].strip(): dict(zip(header[1:], (c.strip() for c in row[1:]), strict=True))
        for row in rows[1:]
        if len(row) == len(header)
    }


def read_clocks(timeout: float = 30) -> dict[str, dict[str, str]]:
    """The clocks of every GPU nvidia-smi sees, or {} where it cannot say (no GPU, an older driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    done = process.run([smi, f"--query-gpu={CLOCKS}", "--format=csv"], timeout)
    return parse_clocks(done.stdout) if done.returncode == 0 else {}


def visible(devices: list[Device], mask: str | None) -> list[Device]:
    """Apply a `CUDA_VISIBLE_DEVICES` value: indices or (prefixes of) UUIDs, in the order given; as in
    CUDA, the list ends at the first entry that names no device, and an empty value hides every device."""
    if mask is None:
        return devices
    chosen: list[Device] = []
    for entry in (e.strip() for e in mask.split(",")):
        match = next((d for d in devices if entry and (entry == str(d.index) or d.uuid.startswith(entry))), None)
        if match is None or match in chosen:
            break
        chosen.append(match)
    return chosen


def device_for(target: Target, devices: list[Device]) -> Device | None:
    """The first device that runs `target`'s code (architecture-specific: the capability must match)."""
    return next((d for d in devices if d.capability == target.capability), None)


def missing_device(target: Target, devices: list[Device]) -> str:
    """`needs an sm_90 device, found none` / `..., found NVIDIA A100 (sm_80)`."""
    found = ", ".join(f"{d.name} ({d.arch})" for d in devices) or "none"
    return f"needs an {target.device_arch} device ({target.label}), found {found}"
