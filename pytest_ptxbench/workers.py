"""Spawning and talking to evaluation children: scrubbed environment, scratch working directory,
timeouts that kill the whole process group, and a clear message when a child dies."""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .child import wire

# Variables a child may see; everything else (API keys, tokens, credentials) stays behind.
_KEPT = ("PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME", "LANG", "LC_ALL")
_KEPT_PREFIXES = ("NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_")  # the GPU host's safety settings
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# Children that run candidate code echo each request's random nonce: a line the candidate writes into
# the reply channel cannot carry it, so it breaks the protocol instead of passing for an answer.
NONCE_CHECKED = frozenset({"candidate"})


@dataclass(frozen=True)
class Sandbox:
    """A command prefix that confines a child: a new network namespace (no network, not even loopback),
    a process namespace (no other process's /proc, so no other view of the files), and a mount namespace
    where the protected folders are read-only, but for the writable ones, and the hidden ones empty."""

    prefix: tuple[str, ...]
    description: str  # what the confinement is, or why there is none


def make_sandbox(
    protected: Sequence[Path], writable: Sequence[Path], hidden: Sequence[Path] = (), timeout: float = 30
) -> Sandbox:
    unshare = shutil.which("unshare")
    if unshare is None:
        return Sandbox((), "none: unshare is not installed")
    missing = [str(h) for h in hidden if not h.is_dir()]
    if missing:
        raise ValueError(f"folders to hide must exist: {', '.join(missing)}")
    protected = sorted({p.resolve() for p in protected if p.is_dir()})
    inside = sorted(
        {w.resolve() for w in writable if w.is_dir() and any(w.resolve().is_relative_to(p) for p in protected)}
    )
    hidden = sorted({h.resolve() for h in hidden})
    steps = [f"mount --bind {shlex.quote(str(p))} {shlex.quote(str(p))}" for p in protected]
    steps += [f"mount --bind {shlex.quote(str(w))} {shlex.quote(str(w))}" for w in inside]
    steps += [f"mount -o remount,bind,ro {shlex.quote(str(p))} {shlex.quote(str(p))}" for p in protected]
    steps += [f"mount -t tmpfs -o ro,size=4k ptxbench-hidden {shlex.quote(str(h))}" for h in hidden]
    # Not `exec`: the namespace's first process ignores the signals it sends itself, so the child would
    # turn a candidate's abort() into SIGSEGV; the shell stays first and reports a signal as 128 + n.
    script = " && ".join([*steps, '"$@"']) + "; exit $?"
    prefix = (unshare, "--net", "--pid", "--kill-child", "--mount-proc", "sh", "-c", script, "sandbox")
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, errors="replace", timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Sandbox((), f"none: unshare failed ({exc})")
    if probe.returncode != 0:
        return Sandbox((), f"none: unshare failed ({probe.stderr.strip()[-200:]})")
    ro = ", ".join(map(str, protected)) or "nothing"
    gone = ", ".join(map(str, hidden)) or "nothing"
    return Sandbox(prefix, f"network and process namespaces; read-only: {ro}; hidden: {gone}")


def make_root_sandbox(
    root: Path, visible: Sequence[Path], writable: Sequence[Path], hidden: Sequence[Path] = (), timeout: float = 30
) -> Sandbox:
    """A command prefix that runs a tool (the compiler) in a file system of its own: new mount, network, IPC
    and process namespaces, and an empty tmpfs mounted at `root` (an empty folder) becomes `/`, where each path
    of `visible` (folder or file) is bound read-only and each of `writable` read-write, at its own path, and each
    of `hidden` that lies inside a visible folder is covered by an empty tmpfs. Deeper paths are mounted last,
    so a folder inside a hidden one can be shown again. A visible symbolic link (`/bin` → `usr/bin`) is copied
    as a link. The command starts in its working directory, which must be visible. As root, or through a user
    namespace where the OS lets others make one; where neither works, no prefix and the reason."""
    unshare, chroot = shutil.which("unshare"), shutil.which("chroot", path=f"{os.defpath}:/usr/sbin:/sbin")
    if unshare is None or chroot is None:
        return Sandbox((), f"none: {'unshare' if unshare is None else 'chroot'} is not installed")
    top = root.resolve()
    entries = [(p if p.is_symlink() else p.resolve(), "visible") for p in visible if p.is_symlink() or p.exists()]
    entries += [(p.resolve(), "writable") for p in writable]
    shown = [p.resolve() for p, _ in entries if not p.is_symlink()]
    entries += [(h.resolve(), "hidden") for h in hidden if any(h.resolve().is_relative_to(s) for s in shown)]
    # a visible path that a shallower visible or writable folder shows already is not mounted again
    entries = [(p, kind) for p, kind in entries if kind != "visible" or _inside(p, entries) in (None, "hidden")]
    q = shlex.quote
    steps = ['here="$(pwd -P)"', f"mount -t tmpfs -o size=1m,mode=755 ptxbench-root {q(str(top))}"]
    for path, kind in sorted(entries, key=lambda entry: len(entry[0].parts)):
        inside = q(f"{top}{path}")
        if kind == "hidden":
            steps.append(f"mount -t tmpfs -o size=1m,mode=755 ptxbench-hidden {inside}")
        elif path.is_symlink():
            steps.append(f"ln -s {q(os.readlink(path))} {inside}")
        else:
            made = f"mkdir -p {inside}" if path.is_dir() else f"mkdir -p {q(f'{top}{path.parent}')} && touch {inside}"
            steps += [made, f"mount --rbind {q(str(path))} {inside}"]
            if kind == "visible":
                steps.append(f"mount -o remount,bind,ro {inside}")
    steps.append(f'{q(chroot)} {q(str(top))} /bin/sh -c \'cd "$0" && exec "$@"\' "$here" "$@"')
    script = " && ".join(steps) + "; exit $?"
    user = ("--user", "--map-root-user") if os.geteuid() != 0 else ()
    namespaces = ("--mount", "--net", "--ipc", "--pid", "--fork", "--kill-child")
    prefix = (unshare, *user, *namespaces, "sh", "-c", script, "sandbox")
    try:
        probe = subprocess.run(
            [*prefix, "true"], capture_output=True, text=True, errors="replace", timeout=timeout, cwd="/"
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Sandbox((), f"none: unshare failed ({exc})")
    if probe.returncode != 0:
        return Sandbox((), f"none: unshare failed ({probe.stderr.strip()[-200:]})")
    listed = {
        kind: ", ".join(str(p) for p, k in entries if k == kind) or "nothing"
        for kind in ("visible", "writable", "hidden")
    }
    return Sandbox(
        prefix,
        f"mount, network, IPC and process namespaces{', as a user namespace' if user else ''}; a root of its own"
        f" showing: {listed['visible']}; writable: {listed['writable']}; hidden: {listed['hidden']}",
    )


def _inside(path: Path, entries: Sequence[tuple[Path, str]]) -> str | None:
    """The kind of the deepest folder of `entries`, other than `path`, that holds `path`; None if none does."""
    around = [(p, kind) for p, kind in entries if p != path and not p.is_symlink() and path.is_relative_to(p)]
    return max(around, key=lambda entry: len(entry[0].parts), default=(path, None))[1]


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
