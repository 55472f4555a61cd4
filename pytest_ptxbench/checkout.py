"""The checkout, watched while candidates run: every file's (size, mtime, ctime) before and after. A write
changes ctime, which no process can set back. This runs whether or not the sandbox mounts the checkout
read-only: the profiler's and sanitizer's children run the candidate outside the sandbox."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .verdict import Status, Verdict

Snapshot = dict[str, tuple[int, int, int]]
# The interpreter's byte-code caches: sibling xdist workers write them as they import, so a change there is
# no evidence against a candidate. (The static allow-list refuses the file APIs a write would need.)
UNWATCHED = frozenset({"__pycache__", ".pytest_cache"})


@dataclass(frozen=True)
class CheckoutGuard:
    root: Path  # its own files: conftest.py, pyproject.toml, tox.ini ...
    trees: tuple[Path, ...]  # walked whole: the harness package and the task catalogue

    def _files(self) -> Iterator[Path]:
        if self.root.is_dir():
            yield from (p for p in self.root.iterdir() if not p.is_dir())
        for tree in self.trees:
            for top, dirs, names in os.walk(tree):
                dirs[:] = [d for d in dirs if d not in UNWATCHED]
                yield from (Path(top, name) for name in names)

    def snapshot(self) -> Snapshot:
        files: Snapshot = {}
        for path in self._files():
            try:
                st = path.lstat()
            except FileNotFoundError:
                continue
            files[str(path)] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        return files

    def changed(self, before: Snapshot) -> list[str]:
        """Files created, deleted or written since `before`, sorted."""
        after = self.snapshot()
        return sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path))

    def judge(self, before: Snapshot, verdicts: list[Verdict]) -> list[Verdict]:
        """`verdicts`, or a failed check alone when the checkout changed since `before`."""
        written = self.changed(before)
        if not written:
            return verdicts
        shown = ", ".join(written[:5]) + (f" and {len(written) - 5} more" if len(written) > 5 else "")
        message = f"the checkout changed while the candidate ran: {shown}"
        return [Verdict("check", Status.FAILED, message, {"checkout_changed": written})]
