"""The checkout, watched while candidates run: every file's (size, mtime, ctime) before and after, over whole
trees: the checkout with `.git`, `tests/`, `scripts/` and `.ci/`, and the harness package where it is installed
elsewhere. A write changes ctime, which no process can set back. This runs whether or not the sandbox mounts the
checkout read-only: the profiler's and sanitizer's children run the candidate outside the sandbox.

Left out: what the harness itself writes meanwhile, the run directories and the interpreter's caches."""

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
RUNS = "runs"  # at the top of a watched tree: the default home of run directories (`rundir.default_path`)


@dataclass(frozen=True)
class CheckoutGuard:
    root: Path  # the checkout (the working directory), walked whole
    trees: tuple[Path, ...] = ()  # walked whole too: the harness package, where it lies outside `root`
    skipped: tuple[Path, ...] = ()  # folders the harness writes into meanwhile: this session's run directory

    def _files(self) -> Iterator[str]:
        named = {self.root, *self.trees}
        tops = sorted(t for t in named if not any(t != other and t.is_relative_to(other) for other in named))
        skipped = {str(p) for p in self.skipped} | {os.path.join(t, RUNS) for t in tops}
        for tree in tops:
            for top, dirs, names in os.walk(tree):
                dirs[:] = [d for d in dirs if d not in UNWATCHED and os.path.join(top, d) not in skipped]
                yield from (os.path.join(top, name) for name in names)

    def snapshot(self) -> Snapshot:
        files: Snapshot = {}
        for path in self._files():
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            files[path] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
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
