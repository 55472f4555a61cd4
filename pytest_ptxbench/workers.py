"""Spawning and talking to evaluation children: scrubbed environment, scratch working directory,
timeouts that kill the whole process group, and a clear message when a child dies."""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from .child import wire

# the sandboxes children run in, from here as before (gpu.py, the tests)
from .sandbox import Sandbox as Sandbox
from .sandbox import make_sandbox as make_sandbox

# Variables a child may see; everything else (API keys, tokens, credentials) stays behind.
_KEPT = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "LANG", "LC_ALL")
_KEPT_PREFIXES = ("NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")  # the GPU host's safety settings
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# Children that run candidate code echo each request's random nonce: a line the candidate writes into
# the reply channel cannot carry it, so it breaks the protocol instead of passing for an answer.
NONCE_CHECKED = frozenset({"capture", "triton_capture"})  # every language's capture child


_SIGNALS = {s.value: s.name for s in signal.Signals}


class ChildFailed(RuntimeError):
    """A child died, hung past its deadline, or broke the protocol; the message says which."""


def child_environment(scratch: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in _KEPT or k.startswith(_KEPT_PREFIXES)}
    paths = [str(PACKAGE_ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(paths),
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            **(extra or {}),
        }
    )
    return env


def child_command(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", f"pytest_ptxbench.child.{module}", *args]


class Child:
    """A long-lived child answering JSON-line requests."""

    def __init__(self, module: str, scratch: Path, env: Mapping[str, str], prefix: Sequence[str] = ()) -> None:
        scratch.mkdir(parents=True, exist_ok=True)
        self.log = scratch / f"{module}.log"
        self._through_shell = bool(prefix)  # the sandbox's shell: a signal's death reads as exit 128 + n
        self._log_file = self.log.open("ab")
        self.process = subprocess.Popen(
            [*prefix, *child_command(module)],
            cwd=scratch,
            env=dict(env),
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            start_new_session=True,
        )
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._nonces = module in NONCE_CHECKED
        assert self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        try:
            while (message := wire.receive(stream)) is not None:
                self._replies.put(message)
        except ValueError:
            pass  # a broken reply channel reads as the child's death
        self._replies.put(None)

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.process.poll() is not None:
            raise ChildFailed(self._death("before the request"))
        assert self.process.stdin is not None
        nonce = secrets.token_hex(16) if self._nonces else None
        try:
            wire.send(self.process.stdin, message if nonce is None else {**message, "nonce": nonce})
            reply = self._replies.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise ChildFailed(
                f"no answer to {message['op']!r} within {timeout:.0f} s: the process group was killed"
            ) from None
        except (BrokenPipeError, OSError):
            reply = None
        if reply is None:
            self.process.wait(timeout=30)
            raise ChildFailed(self._death(f"during {message['op']!r}"))
        if nonce is not None and reply.pop("nonce", None) != nonce:
            self.kill()
            raise ChildFailed(
                f"a reply to {message['op']!r} without its request's nonce: something other than the harness wrote"
                f" to the {self.log.stem} child's reply channel; the process group was killed"
            )
        return reply

    def _death(self, when: str) -> str:
        code = self.process.returncode
        number = -code if code is not None and code < 0 else None
        if self._through_shell and code is not None and code > 128:
            number = code - 128
        how = f"signal {_SIGNALS.get(number, number)}" if number is not None else f"exit code {code}"
        return f"the {self.log.stem} child died {when} ({how}); log: {self.tail()}"

    def tail(self, chars: int = 1500) -> str:
        self._log_file.flush()
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[-chars:].strip() or "(empty)"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def close(self) -> None:
        if self.alive:
            try:
                assert self.process.stdin is not None
                wire.send(self.process.stdin, {"op": "exit"})
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._log_file.close()
