"""Sandboxes: command prefixes that confine a process with Linux namespaces where the OS allows (as root,
or through a user namespace), and otherwise say why there is none. Imports nothing beyond the standard
library, so the build can use them where the GPU extras are not installed."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


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
