"""The guardian of one external tool: `process.run` starts it as the leader of a new process group with
`python -I -S guardian.py PARENT_PID MEMORY_BYTES COMMAND...`. It caps the address space of every process of
the group (MEMORY_BYTES, 0 for no cap), runs COMMAND and ends as COMMAND ends (the same exit status, the
same signal). When the harness process PARENT_PID dies, however it dies (SIGKILL included), the kernel sends
the guardian SIGTERM and the guardian kills the whole group: no compiler outlives the run.

It imports nothing of the package (it runs without the site folder, so it starts in milliseconds)."""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys
from types import FrameType

PR_SET_PDEATHSIG = 1
CANNOT_RUN = 127  # the shell's status for a command that could not be started


def _end_group(signum: int = signal.SIGTERM, frame: FrameType | None = None) -> None:
    os.killpg(0, signal.SIGKILL)


def _exit_like(status: int) -> int:
    """COMMAND's exit status, or its death by the same signal (without a core file of the guardian's own)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    return os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    parent, memory, command = int(argv[0]), int(argv[1]), argv[2:]
    signal.signal(signal.SIGTERM, _end_group)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        print(f"guardian: prctl: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return CANNOT_RUN
    if os.getppid() != parent:  # the harness died before the death signal was armed
        _end_group()
    if memory:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"cannot run {command[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(CANNOT_RUN)
    return _exit_like(os.waitpid(pid, 0)[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
