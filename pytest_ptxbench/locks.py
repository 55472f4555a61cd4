"""Host-wide exclusive locks on files (`flock`), for processes that share a GPU, a build folder or a run
directory."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


class Busy(Exception):
    """Another process holds the lock; `note` is what it wrote into the lock file."""

    def __init__(self, note: str) -> None:
        super().__init__(note)
        self.note = note


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created if missing) for the block; other holders wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def hold(path: Path, note: str) -> IO[str]:
    """Take an exclusive `flock` on `path` without waiting, and write `note` into the file for whoever finds
    it held. The lock lasts until the returned file is closed or the process ends; Busy when another
    process holds it."""
    handle = path.open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        found = handle.read().strip()
        handle.close()
        raise Busy(found or "no note") from None
    except BaseException:
        handle.close()
        raise
    handle.truncate(0)
    handle.write(note)
    handle.flush()
    return handle
