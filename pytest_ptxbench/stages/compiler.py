"""nvcc, confined. It sees the build folder (read-write), the toolkit and the system's own compiler, headers
and libraries; where the OS allows, in a root of its own (`sandbox.make_root_sandbox`: no checkout, no home, no
other file of the run or of /tmp, no network). Its environment is scrubbed, each of its processes may map at
most `MEMORY_CAP`, the timeout and the end of the run end its whole tree (`process.run`), and its temporary
files live in a folder deleted afterwards. Sandbox or not, every file its preprocessor read must lie in that
view, and what it says about a file outside the view is cut before it reaches a verdict, a log or the model."""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import process
from ..sandbox import Sandbox, make_root_sandbox

HARNESS = Path(__file__).resolve().parents[2]  # the package's checkout (or site-packages): hidden from nvcc
MEMORY_CAP = 4 << 30  # bytes of address space per compiler process; the reference kernels build within 256 MiB
# The system's programs, libraries and headers (the host compiler among them), the dynamic loader's cache,
# the links behind `c++` and `cc`, and /dev/null.
SYSTEM = tuple(
    Path(p)
    for p in (
        *("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"),
        *("/etc/ld.so.cache", "/etc/alternatives", "/dev/null"),
    )
)
KEPT = ("PATH", "LANG", "LC_ALL")  # of the caller's environment; API keys, tokens and NVCC_* flags stay behind
READS = "reads.d"  # the preprocessor's list of the files it read (`-MD -MF`), in the temporary folder
# A diagnostic's first line, `file(12): error: ...` (cudafe++, cicc) or `file:12:3: error: ...` (gcc, as), or a
# file's heading (`file: In function ...`). Lines that quote a file's text are indented, so never match.
_HEADER = re.compile(r"^(?P<path>[^\s:(][^:(]*)(?:\(\d+\)|(?::\d+)+)?: ")
_INCLUDED_FROM = re.compile(r"^(In file included from |\s+from )")
_TOP = re.compile(r"^#\$ TOP=(.+)$", re.MULTILINE)
_NAMED = re.compile(r"^(?:-[LI])?(/.+)$")  # an absolute path on the command line, alone or after -L or -I


@dataclass(frozen=True)
class View:
    """What the compiler may see: `visible` read-only, `writable` read-write, less `hidden` (the checkout, the
    working directory, home) wherever those lie inside the others. Of nested folders the deepest decides."""

    visible: tuple[Path, ...]
    writable: tuple[Path, ...]
    hidden: tuple[Path, ...]

    def shows(self, path: Path) -> bool:
        path = Path(os.path.normpath(path))
        named = [(p, True) for p in (*self.visible, *self.writable)] + [(p, False) for p in self.hidden]
        around = [(p, shown) for p, shown in named if path.is_relative_to(p)]
        return max(around, key=lambda entry: len(entry[0].parts), default=(path, False))[1]


@dataclass(frozen=True)
class Compiled:
    returncode: int | None  # None: killed at the timeout
    stdout: str  # what nvcc said, less what it said about files outside the view; nothing where it read any
    stderr: str
    read_outside: list[str]  # files the preprocessor read outside the view
    seconds: float
    sandbox: str  # the confinement, or why there is none

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


@functools.cache
def toolkit(nvcc: Path) -> Path:
    """The toolkit's folder, as nvcc reports it (a wrapper script on PATH does not hide it); within NVIDIA's
    wheels, the folder of all of them."""
    said = process.run([str(nvcc), "--dryrun", "-E", "-x", "cu", os.devnull], timeout=60).stderr
    found = _TOP.search(said)
    top = Path(found.group(1).strip()).resolve() if found else nvcc.resolve().parent.parent
    return top.parent if top.parent.name == "nvidia" else top


def view(nvcc: Path, argv: Sequence[str], folder: Path, scratch: Path) -> View:
    """The system, the toolkit and the files the harness itself names on the command line (the driver library)
    read-only; the build and temporary folders read-write; the checkout, the working directory and home hidden."""
    files = [Path(m.group(1)) for a in argv[1:] if (m := _NAMED.match(a)) and Path(m.group(1)).exists()]
    visible = (*SYSTEM, toolkit(nvcc), *(p.resolve() for p in files), *(p for p in files if p.is_symlink()))
    writable = (folder.resolve(), scratch.resolve())
    home = Path(os.path.expanduser("~")).resolve()  # where no home can be found, "~": nothing to hide
    return View(visible, writable, (HARNESS, Path.cwd().resolve(), home))


def environment(nvcc: Path, scratch: Path) -> dict[str, str]:
    """`KEPT` of this process's environment, nvcc's folder first on PATH, HOME and TMPDIR in `scratch`."""
    env = {k: os.environ[k] for k in KEPT if k in os.environ}
    path = os.pathsep.join([str(nvcc.parent), os.environ.get("PATH", os.defpath)])
    return {**env, "PATH": path, "HOME": str(scratch), "TMPDIR": str(scratch)}


def run(
    nvcc: Path, argv: Sequence[str], folder: Path, timeout: float, sandbox: str = "auto", memory: int = MEMORY_CAP
) -> Compiled:
    """Run `argv` (nvcc first) in `folder`, confined. `sandbox`: auto (namespaces where the OS allows), namespaces
    (required: a ValueError where they cannot be made) or off."""
    with tempfile.TemporaryDirectory(prefix="ptxbench-nvcc-") as temporary:
        root, scratch = Path(temporary, "root"), Path(temporary, "tmp")
        root.mkdir()
        scratch.mkdir()
        seen = view(nvcc, argv, folder, scratch)
        confined = (
            make_root_sandbox(root, seen.visible, seen.writable, seen.hidden)
            if sandbox != "off"
            else Sandbox((), "none: --ptx-sandbox=off")
        )
        if sandbox == "namespaces" and not confined.prefix:
            raise ValueError(f"--ptx-sandbox=namespaces cannot confine nvcc here: {confined.description}")
        reads = scratch / READS
        command = [*confined.prefix, *argv, "-MD", "-MF", str(reads)]
        done = process.run(command, timeout, cwd=folder, env=environment(nvcc, scratch), memory=memory)
        outside = _read_outside(reads.read_text(errors="replace"), seen, folder) if reads.is_file() else []
    stdout, stderr = ("", "") if outside else (cut_outside(text, seen, folder) for text in (done.stdout, done.stderr))
    return Compiled(done.returncode, stdout, stderr, outside, done.seconds, confined.description)


def _located(name: str, folder: Path) -> Path:
    return (folder / name).resolve()


def _read_outside(listing: str, seen: View, folder: Path) -> list[str]:
    """The files of a `-MD` listing (`target : a.cu \\ /usr/include/b.h ...`) that lie outside the view."""
    tokens = re.split(r"(?<!\\)\s+", listing.replace("\\\n", " ").strip())
    target = next((i for i, token in enumerate(tokens) if token.endswith(":")), len(tokens))
    names = [t.replace("\\ ", " ").replace("$$", "$") for t in tokens[target + 1 :]]
    return sorted({str(path) for path in (_located(name, folder) for name in names if name) if not seen.shows(path)})


def cut_outside(text: str, seen: View, folder: Path) -> str:
    """`text` without the diagnostics located in files outside the view (their first line, the source lines
    they quote and their notes, up to the next diagnostic about a file inside it), each run of them replaced by
    a line that names the files."""
    kept: list[str] = []
    cut: list[str] = []
    dropping = False
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header:
            name = header["path"].strip()
            dropping = not name.startswith("<") and not seen.shows(_located(name, folder))
            if dropping and name not in cut:
                cut.append(name)
        elif _INCLUDED_FROM.match(line):
            dropping = False
        if dropping:
            continue
        if cut:
            kept.append(_notice(cut))
            cut = []
        kept.append(line)
    return "".join(kept + ([_notice(cut)] if cut else []))


def _notice(names: list[str]) -> str:
    return f"[messages about {', '.join(names)} cut: outside the candidate's folder and the toolkit]\n"
