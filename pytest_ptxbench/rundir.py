"""The run directory: environment, one JSON line per test, the sessions that wrote it, and every build's files.

One pytest session writes it at a time (`claim`); xdist workers of that session share it. Every file is
replaced whole and atomically, never appended to. The format is described in `docs/run-directory.md`.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from . import __version__
from .locks import Busy, hold, locked

FORMAT = "ptxbench-run/2"
ENVIRONMENT = "environment.json"
RESULTS = "results.jsonl"
SESSIONS = "sessions.json"
RUN_LOCK = ".run.lock"  # held by the session's controlling pytest process while the session lasts
WRITE_LOCK = ".write.lock"  # held by a process of the session while it rewrites results or sessions
CUT_SHORT_EXITS = {2: "interrupted", 3: "stopped by an internal error"}  # pytest exit statuses


class RunDirectoryError(ValueError):
    """A run directory this session cannot write: says why (the caller names the path)."""


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


def enclosing_run(path: Path) -> Path | None:
    """The run directory that is or holds `path` (found by its own files), or None."""
    for folder in [path.resolve(), *path.resolve().parents]:
        if any((folder / name).is_file() for name in (ENVIRONMENT, RESULTS, SESSIONS)):
            return folder
    return None


def now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class SessionRecord:
    """One pytest session that wrote the run: the benchmark tests it collected (every xdist worker adds
    its own collection), and when it finished with which pytest exit status (None while it runs, or
    when it was killed)."""

    id: str
    started: str
    collected: list[str]
    finished: str | None = None
    exit_status: int | None = None

    @property
    def cut_short(self) -> str | None:
        """Why this session ended early, in words, or None."""
        if self.finished is None:
            return f"the session started {self.started} did not finish (killed, or still running)"
        if self.exit_status in CUT_SHORT_EXITS:
            return f"the session started {self.started} was {CUT_SHORT_EXITS[self.exit_status]}"
        return None


@dataclass
class RunDirectory:
    path: Path
    session: str = field(default_factory=lambda: uuid.uuid4().hex)  # shared by the session's xdist workers

    def create(self) -> None:
        """The folder, created when missing; RunDirectoryError when it is a file or cannot be made."""
        if self.path.exists() and not self.path.is_dir():
            raise RunDirectoryError("is a file, not a folder")
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirectoryError(f"cannot be created: {exc.strerror}") from None

    def claim(self, model: str) -> IO[str]:
        """Create the folder and hold its run lock until the returned file is closed, so that two sessions
        never write one run directory at once. RunDirectoryError when the folder cannot be written, another
        session holds it, or it holds a run of another model."""
        self.create()
        if not os.access(self.path, os.W_OK | os.X_OK):
            read_only = os.statvfs(self.path).f_flag & os.ST_RDONLY
            raise RunDirectoryError("is on a read-only file system" if read_only else "is not writable (permissions)")
        note = f"pid {os.getpid()} on {socket.gethostname()}, started {now()}"
        try:
            held = hold(self.path / RUN_LOCK, note)
        except Busy as busy:
            raise RunDirectoryError(
                f"another pytest session ({busy.note}) is writing this run directory; wait for it to end or "
                "choose another folder"
            ) from None
        except OSError as exc:
            raise RunDirectoryError(f"cannot be written: {exc.strerror}") from None
        try:
            self._check_model(model)
        except RunDirectoryError:
            held.close()
            raise
        return held

    def _check_model(self, model: str) -> None:
        """A run directory holds the runs of one model: its earlier rows must not be mixed with another's."""
        file = self.path / ENVIRONMENT
        if not file.exists():
            return
        try:
            earlier = json.loads(file.read_bytes())["settings"]["model"]
        except (ValueError, KeyError, TypeError) as exc:
            raise RunDirectoryError(f"{file} cannot be read ({type(exc).__name__}: {exc})") from None
        if earlier != model:
            raise RunDirectoryError(
                f"holds a run of --ptx-model={earlier} ({file}); this session's model is {model}: choose another folder"
            )

    def start(self, environment: Callable[[], dict[str, Any]]) -> None:
        """Write `environment.json` once: the first process of the first session to evaluate gathers it."""
        with self._writing():
            target = self.path / ENVIRONMENT
            if not target.exists():
                record = {
                    "format": FORMAT,
                    "harness_version": __version__,
                    "python": sys.version.split()[0],
                    "platform": platform.platform(),
                    "started": now(),
                    **environment(),
                }
                write_atomic(target, json.dumps(record, indent=1, sort_keys=True))

    def build_dir(self, group: str, digest: str) -> Path:
        return self.path / "builds" / f"{group}-{digest}"

    def append_result(self, row: dict[str, Any]) -> None:
        """Record one row, marked with this session. It replaces the rows an earlier session wrote for the
        same test (a rerun or a resume never adds a second copy) and this session's row of the same test and
        budget. The whole file is rewritten and renamed under the write lock, so a full disk or a kill
        leaves the earlier file whole and parallel workers never lose each other's rows."""
        row = {**row, "session": self.session}
        with self._writing():
            file = self.path / RESULTS
            lines = file.read_bytes().splitlines() if file.exists() else []
            kept = [line for line in lines if line.strip() and not _replaced_by(line, row)]
            kept.append(json.dumps(row, sort_keys=True).encode())
            try:
                write_atomic(file, b"".join(line + b"\n" for line in kept))
            except OSError as exc:
                raise OSError(
                    exc.errno, f"{file}: cannot record {row['id']}: {exc.strerror}; the file keeps its earlier rows"
                ) from None

    def record_collected(self, ids: Iterable[str]) -> None:
        """Add the benchmark tests a process of this session collected to the session's record."""
        with self._writing():
            sessions = self._sessions()
            mine = next((s for s in sessions if s.id == self.session), None)
            if mine is None:
                mine = SessionRecord(self.session, now(), [])
                sessions.append(mine)
            mine.collected = list(dict.fromkeys([*mine.collected, *ids]))
            self._save_sessions(sessions)

    def record_end(self, exit_status: int) -> None:
        """Mark this session finished with pytest's exit status (nothing when it collected no benchmark test)."""
        if not (self.path / SESSIONS).exists():
            return
        with self._writing():
            sessions = self._sessions()
            for record in sessions:
                if record.id == self.session:
                    record.finished, record.exit_status = now(), exit_status
                    self._save_sessions(sessions)

    def _sessions(self) -> list[SessionRecord]:
        file = self.path / SESSIONS
        if not file.exists():
            return []
        try:
            return [SessionRecord(**record) for record in json.loads(file.read_bytes())]
        except (ValueError, TypeError) as exc:
            raise RunDirectoryError(f"{file} cannot be read ({type(exc).__name__}: {exc})") from None

    def _save_sessions(self, sessions: list[SessionRecord]) -> None:
        write_atomic(self.path / SESSIONS, json.dumps([asdict(s) for s in sessions], indent=1))

    @contextmanager
    def _writing(self) -> Iterator[None]:
        self.create()
        with locked(self.path / WRITE_LOCK):
            yield


def _replaced_by(line: bytes, new: dict[str, Any]) -> bool:
    """Whether a recorded line is superseded by the row `new` (a line that is not a row is kept as it is)."""
    try:
        old = json.loads(line)
    except ValueError:
        return False
    if not isinstance(old, dict) or old.get("id") != new["id"]:
        return False
    return old.get("session") != new["session"] or old.get("budget") == new.get("budget")


@contextmanager
def atomically(path: Path) -> Iterator[Path]:
    """A temporary name to write, flushed to disk and renamed to `path` when the block ends: a reader never
    sees half a file, and a write that fails (a full disk) leaves the earlier file as it was."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        with temporary.open("rb") as written:
            os.fsync(written.fileno())  # a full disk may only show here (NFS, delayed allocation)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def write_atomic(path: Path, data: str | bytes) -> None:
    with atomically(path) as temporary:
        temporary.write_bytes(data.encode() if isinstance(data, str) else data)
