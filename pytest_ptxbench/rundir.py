"""The run directory: environment, one JSON line per test, and every build's files."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__

FORMAT = "ptxbench-run/2"


def default_path(base: Path, model: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    kind, _, rest = model.partition(":")
    label = f"{kind}-{Path(rest).name}" if rest else kind  # file:/a/b/mine → file-mine
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    return base / "runs" / f"{stamp}-{safe}"


def task_set_hash(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass
class RunDirectory:
    path: Path

    def start(self, environment: Callable[[], dict[str, Any]]) -> None:
        """Create the folder and write `environment.json` (once; xdist workers share the folder, and only
        the first gathers the environment)."""
        self.path.mkdir(parents=True, exist_ok=True)
        target = self.path / "environment.json"
        if not target.exists():
            record = {
                "format": FORMAT,
                "harness_version": __version__,
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "started": datetime.now(timezone.utc).isoformat(),
                **environment(),
            }
            write_atomic(target, json.dumps(record, indent=1, sort_keys=True))

    def build_dir(self, group: str, digest: str) -> Path:
        return self.path / "builds" / f"{group}-{digest}"

    def append_result(self, row: dict[str, Any]) -> None:
        """One line per test; a single O_APPEND write so lines of parallel workers never interleave."""
        line = (json.dumps(row, sort_keys=True) + "\n").encode()
        fd = os.open(self.path / "results.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


@contextmanager
def atomically(path: Path) -> Iterator[Path]:
    """A temporary name to write, renamed to `path` when the block ends: a reader never sees half a file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomic(path: Path, text: str) -> None:
    with atomically(path) as temporary:
        temporary.write_text(text)
