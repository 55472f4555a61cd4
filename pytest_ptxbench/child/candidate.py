"""The evaluation child: runs an untrusted candidate library, with no vendor GPU library loaded.

It reads requests (JSON lines) on stdin and answers on its original stdout, each answer echoing its
request's nonce; the candidate's own output goes to stderr, which the parent keeps as a log and never
parses. `--once FILE` runs a list of requests from a file and writes the last answer to the file the
request names (for ncu and compute-sanitizer).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import wire
from .cudart import CudaError, Runtime
from .timing import Clock, RunFailed
from .tracing import Tracer

GUARD_BYTES = 1 << 16  # after every input and output: a write past the end changes it
GUARD_BYTE = 0xA5
_CTYPES = {
    "int": ctypes.c_int,
    "size_t": ctypes.c_size_t,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "int64_t": ctypes.c_int64,
    "long": ctypes.c_long,
    "cudaStream_t": ctypes.c_void_p,
}


def _ctype(declared: str) -> Any:
    return ctypes.c_void_p if "*" in declared else _CTYPES[declared.replace("const ", "").strip()]


class Candidate:
    def __init__(self, request: dict[str, Any]) -> None:
        self.rt = Runtime(Path(request["cudart"]))
        self.library = ctypes.CDLL(request["library"])
        self.launch = getattr(self.library, request["launcher"])
        self.params: list[dict[str, Any]] = request["params"]
        self.launch.argtypes = [_ctype(p["ctype"]) for p in self.params]
        self.launch.restype = ctypes.c_int
        self.stream = self.rt.stream()
        self.buffers: dict[str, int] = {}
        self.nbytes: dict[str, int] = {}
        for p in self.params:
            if p["role"] in ("input", "output"):
                size = wire.ITEMSIZE[p["dtype"]]
                for dim in p["shape"]:
                    size *= dim
                self.nbytes[p["name"]] = size
                self.buffers[p["name"]] = self.rt.malloc(size + GUARD_BYTES)
        self.workspace_bytes = int(request["workspace_bytes"])
        self.workspace = self.rt.malloc(self.workspace_bytes)
        self.sets: list[dict[str, int]] = []
        self.set_hashes: list[dict[str, str]] = []
        self._clock: Clock | None = None

    def inputs(self) -> list[dict[str, Any]]:
        return [p for p in self.params if p["role"] == "input"]

    def outputs(self) -> list[dict[str, Any]]:
        return [p for p in self.params if p["role"] == "output"]

    def load_sets(self, sets: list[dict[str, str]]) -> dict[str, Any]:
        """Input sets from files into device memory, one copy each; they are copied in place per run."""
        for files in sets:
            pointers, hashes = {}, {}
            for p in self.inputs():
                data = Path(files[p["name"]]).read_bytes()
                if len(data) != self.nbytes[p["name"]]:
                    raise ValueError(f"{files[p['name']]}: {len(data)} bytes, expected {self.nbytes[p['name']]}")
                pointers[p["name"]] = self.rt.malloc(len(data))
                self.rt.copy_to_device(pointers[p["name"]], data)
                hashes[p["name"]] = hashlib.sha256(data).hexdigest()
            self.sets.append(pointers)
            self.set_hashes.append(hashes)
        return {"sets": len(self.sets)}

    def prepare(self, index: int, poison: int = 0xFF) -> None:
        """Fresh inputs (set `index` modulo the count) copied in place, outputs poisoned, workspace zeroed: all
        on the legacy stream, not waited for here."""
        chosen = self.sets[index % len(self.sets)]
        for p in self.inputs():
            self.rt.copy_on_device(self.buffers[p["name"]], chosen[p["name"]], self.nbytes[p["name"]])
        for p in self.outputs():
            self.rt.memset(self.buffers[p["name"]], poison, self.nbytes[p["name"]])
        for name, pointer in self.buffers.items():
            self.rt.memset(pointer + self.nbytes[name], GUARD_BYTE, GUARD_BYTES)
        self.rt.memset(self.workspace, 0, self.workspace_bytes)

    def overruns(self) -> list[str]:
        """The buffers whose guard region after the end was written."""
        return [
            name
            for name, pointer in self.buffers.items()
            if self.rt.copy_to_host(pointer + self.nbytes[name], GUARD_BYTES) != bytes([GUARD_BYTE]) * GUARD_BYTES
        ]

    def call(self) -> int:
        args: list[Any] = []
        for p in self.params:
            role = p["role"]
            if role in ("input", "output"):
                args.append(self.buffers[p["name"]])
            elif role == "scalar":
                args.append(p["value"])
            elif role == "workspace":
                args.append(self.workspace)
            elif role == "workspace_bytes":
                args.append(self.workspace_bytes)
            else:
                args.append(self.stream)
        return int(self.launch(*args))

    def save_outputs(self, folder: Path) -> dict[str, str]:
        saved = {}
        for p in self.outputs():
            path = folder / f"{p['name']}.bin"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.rt.copy_to_host(self.buffers[p["name"]], self.nbytes[p["name"]]))
            saved[p["name"]] = str(path)
        return saved

    def check(self, request: dict[str, Any]) -> dict[str, Any]:
        """One call on input set `set` with outputs poisoned by `poison`; outputs saved; inputs rehashed."""
        index = int(request["set"])
        self.prepare(index, int(request["poison"]))
        # prepare's copies and fills run on the legacy stream, which the call's non-blocking stream does not
        # wait for: without this, a long kernel can overlap them (reading half-copied inputs, its outputs
        # re-poisoned after it wrote them). Timed runs synchronise after their L2 flush.
        fault = self.rt.synchronize()
        if fault != 0:
            raise RunFailed(f"the device reported {self.rt.error_name(fault)} ({fault}) while preparing the inputs")
        code = self.call()
        fault = self.rt.synchronize()
        if code != 0 or fault != 0:
            failed = code or fault
            raise RunFailed(
                f"{'the call returned' if code else 'the device reported'} {self.rt.error_name(failed)} ({failed})"
            )
        changed = []
        for p in self.inputs():
            data = self.rt.copy_to_host(self.buffers[p["name"]], self.nbytes[p["name"]])
            if hashlib.sha256(data).hexdigest() != self.set_hashes[index % len(self.sets)][p["name"]]:
                changed.append(p["name"])
        return {
            "inputs_changed": changed,
            "overruns": self.overruns(),
            "outputs": self.save_outputs(Path(request["outputs_dir"])),
        }

    def time(self, request: dict[str, Any]) -> dict[str, Any]:
        """A block of timed runs; the outputs of the runs listed in `save` are kept for a recheck."""
        if self._clock is None:
            self._clock = Clock(self.rt, Tracer(), self.stream)
        runs = self._clock.runs(int(request["runs"]), int(request["first"]), self.prepare, self.call)
        saved = {}
        if request.get("save_last"):
            last = runs[-1]["index"]
            saved[str(last)] = self.save_outputs(Path(request["outputs_dir"]) / str(last))
        return {"runs": runs, "saved": saved, "idle": self.rt.synchronize() == 0}


def handle(child: Candidate | None, request: dict[str, Any]) -> tuple[Candidate | None, dict[str, Any]]:
    op = request.get("op")
    if op == "load":
        child = Candidate(request)
        return child, {"loaded": True}
    if child is None:
        raise ValueError(f"{op!r} before 'load'")
    if op == "sets":
        return child, child.load_sets(request["sets"])
    if op == "check":
        return child, child.check(request)
    if op == "time":
        return child, child.time(request)
    raise ValueError(f"unknown request {op!r}")


def answer(child: Candidate | None, request: dict[str, Any]) -> tuple[Candidate | None, dict[str, Any], bool]:
    """(child, answer, fatal): a CUDA fault leaves the context unusable, so the child must end."""
    try:
        child, result = handle(child, request)
        return child, {"ok": True, **result}, False
    except (CudaError, RunFailed) as exc:
        return child, {"ok": False, "error": str(exc), "fatal": True}, True
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
        return child, {"ok": False, "error": f"{type(exc).__name__}: {exc}", "fatal": False}, False


def serve() -> None:
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the candidate's printf lands in the log, never in the reply channel
    child: Candidate | None = None
    while (request := wire.receive(sys.stdin)) is not None:
        if request.get("op") == "exit":
            break
        child, reply, fatal = answer(child, request)
        wire.send(replies, {**reply, "nonce": request.get("nonce")})  # what a forged line cannot know
        if fatal:
            sys.exit(3)


def once(path: Path) -> None:
    plan = json.loads(path.read_text())
    child: Candidate | None = None
    reply: dict[str, Any] = {"ok": False, "error": "no requests"}
    for request in plan["requests"]:
        child, reply, _ = answer(child, request)
        if not reply["ok"]:
            break
    Path(plan["result"]).write_text(json.dumps(reply))
    sys.exit(0 if reply["ok"] else 3)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--once":
        once(Path(sys.argv[2]))
    else:
        serve()
