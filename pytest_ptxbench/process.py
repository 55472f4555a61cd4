"""Running external tools: each under a guardian (`guardian.py`) that leads a new process group, so that the
whole tree of the tool ends with the run: at the timeout, on any exception here (Ctrl-C included) and, through
the guardian, when this process dies, even by SIGKILL. Output is kept whole and decoded with replacement."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

GUARDIAN = Path(__file__).with_name("guardian.py")


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def command(self) -> str:
        return " ".join(self.argv)


def run(
    argv: Sequence[str],
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    memory: int | None = None,
) -> Completed:
    """Run `argv` in its own process group; at `timeout` the group is killed and returncode is None.
    `memory`: the address space, in bytes, each process of the group may map. A command that cannot be
    started exits 127 with the reason on stderr."""
    start = time.monotonic()
    guarded = [sys.executable, "-I", "-S", str(GUARDIAN), str(os.getpid()), str(memory or 0), *argv]
    proc = subprocess.Popen(
        guarded,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    code: int | None = None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        _end(proc)
        stdout, stderr = proc.communicate()
    except BaseException:  # Ctrl-C, or anything else: the tool's tree ends here too
        _end(proc)
        proc.wait()
        raise
    return Completed(tuple(argv), code, _text(stdout), _text(stderr), time.monotonic() - start)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process group of `proc`, which is not yet reaped, so its id still names that group."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _text(output: bytes) -> str:
    return output.decode("utf-8", errors="replace")
