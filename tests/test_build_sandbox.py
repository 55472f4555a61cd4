"""The build, confined (reward hack #31): nvcc sees the candidate's folder, the contract and the toolkit only;
what it read or said about other files never reaches a verdict, a log or the results; its environment is
scrubbed, its memory capped, its temporary files removed, and its whole process tree ends with the run,
however the run ends (timeout, Ctrl-C, SIGTERM, SIGKILL). "auto" runs need the sandbox (root or a user
namespace, and unshare) and skip without it; "off" shows what holds without one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.sandbox import make_root_sandbox
from pytest_ptxbench.stages import compiler
from pytest_ptxbench.stages.build import build
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import Family, load_family
from pytest_ptxbench.verdict import Status, Verdict

from .conftest import KERNELS, PLANTED, ROOT, TASKS

SECRET = "PTXBENCH-SECRET-7f3a"  # in a host file a candidate includes: must appear nowhere
SLOW = KERNELS / "slow_to_compile.cu"
COMPILING = {"cudafe++", "cicc"}  # nvcc's children in their long work
# Host files whose lines the compiler would quote: the preprocessor fails on the first (so it lists no files
# read), the compiler on the second (the preprocessor read it whole).
HOST_FILES = {
    "directive": f"# {SECRET} a comment line of a script\nimport os\n",
    "code": f"int leaked = {SECRET.replace('-', '_')};\n",
}
FROM_THE_ENVIRONMENT = """\
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#ifdef PTXBENCH_FROM_THE_ENVIRONMENT
#error "the caller's environment reached nvcc"
#endif
extern "C" cudaError_t ptxbench_gemm(const __nv_bfloat16* A, const __nv_bfloat16* B, __nv_bfloat16* C, int M, int N, int K,
                                     void* workspace, size_t workspace_bytes, cudaStream_t stream) {
    return cudaSuccess;
}
"""
# Builds the slow kernel; after Ctrl-C it lives on, as pytest does to report, until it is killed.
BUILD_SCRIPT = """
import signal, sys, time
from pathlib import Path
from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.stages.build import build
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import load_family
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises KeyboardInterrupt, as in pytest
family = load_family(Path(sys.argv[1]))
candidate = Candidate.from_file("gemm-n7168-k5120", "h100", Path(sys.argv[2]))
try:
    build(candidate, family.launcher, TARGETS["h100"], Path(sys.argv[3]), 600, sandbox=sys.argv[4])
except KeyboardInterrupt:
    print("interrupted", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def sandbox(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The build's `sandbox` mode; "auto" only where the sandbox can be made here."""
    mode: str = request.param
    if mode == "auto":
        (tmp_path / "probe").mkdir()
        made = make_root_sandbox(tmp_path / "probe", compiler.SYSTEM, [])
        if not made.prefix:
            pytest.skip(f"no sandbox on this machine: {made.description}")
    return mode


MODES = pytest.mark.parametrize("sandbox", ["auto", "off"], indirect=True)


def _build(
    gemm: Family,
    source: str,
    folder: Path,
    sandbox: str = "auto",
    timeout: float = 300,
    memory: int = compiler.MEMORY_CAP,
) -> Verdict:
    candidate = Candidate("gemm-n7168-k5120", "h100", source, "planted")
    return build(candidate, gemm.launcher, TARGETS["h100"], folder, timeout, sandbox, memory)


def _everything(verdict: Verdict) -> str:
    """What reaches the model (the message) and the results (the whole verdict), and the log kept."""
    return json.dumps(verdict.to_json()) + Path(verdict.data["log"]).read_text()


@pytest.mark.parametrize("stage", ["build", "triton_build", "inspect"])
def test_the_static_stages_need_no_gpu_extra(stage: str) -> None:
    """The README's CPU machine has the toolchain extra only: building (CUDA or Triton) and inspecting import
    neither numpy nor torch."""
    code = f"import sys, pytest_ptxbench.stages.{stage}; print(sorted({{'numpy', 'torch'}} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr


@pytest.mark.parametrize("family", ["gemm", "attention_fwd", "attention_bwd"])
@pytest.mark.parametrize("sandbox", ["auto"], indirect=True)
def test_the_reference_kernels_build_in_the_sandbox(toolchain: None, family: str, sandbox: str, tmp_path: Path) -> None:
    task = load_family(TASKS / f"{family}.yaml")
    reference = TASKS / "reference" / "h100" / f"{family}.cu"
    built = build(Candidate.from_file(family, "h100", reference), task.launcher, TARGETS["h100"], tmp_path, 300)
    assert built.passed, built.message
    assert built.data["sandbox"].startswith("mount, network, IPC and process namespaces")
    assert built.data["memory_cap"] == compiler.MEMORY_CAP


@MODES
def test_including_the_reference_kernel_fails_the_build(
    toolchain: None, gemm: Family, sandbox: str, tmp_path: Path
) -> None:
    source = (PLANTED / "includes_reference.cu").read_text().replace("PTXBENCH_CHECKOUT", str(ROOT))
    built = _build(gemm, source, tmp_path / "build", sandbox)
    assert built.status is Status.FAILED
    reference = str((TASKS / "reference" / "h100" / "gemm.cu").resolve())
    if sandbox == "auto":  # the checkout is not there
        assert f"fatal error: {reference}: No such file or directory" in built.message
    else:  # it was read, and the preprocessor says so
        assert built.message == f"the build read files outside the candidate's folder and the toolkit: {reference}"
        assert built.data["read_outside"] == [reference]
        assert Path(built.data["log"]).read_text().splitlines()[1:] == [built.message]  # the output withheld


@MODES
@pytest.mark.parametrize("kind", HOST_FILES)
def test_a_host_file_the_compiler_would_quote_never_reaches_the_verdict_or_the_log(
    toolchain: None, gemm: Family, sandbox: str, kind: str, tmp_path: Path
) -> None:
    host_file = tmp_path / "host" / "notes.txt"
    host_file.parent.mkdir()
    host_file.write_text(HOST_FILES[kind])
    source = (PLANTED / "includes_host_file.cu").read_text().replace("PTXBENCH_HOST_FILE", str(host_file))
    built = _build(gemm, source, tmp_path / "build", sandbox)
    assert built.status is Status.FAILED
    assert SECRET not in _everything(built) and SECRET.replace("-", "_") not in _everything(built)
    if sandbox == "auto":
        assert f"fatal error: {host_file}: No such file or directory" in built.message
    elif kind == "directive":  # what the preprocessor said about the file is cut, the rest kept
        assert f"[messages about {host_file} cut: outside the candidate's folder and the toolkit]" in built.message
        assert "In file included from candidate.cu:" in built.message
    else:
        assert built.data["read_outside"] == [str(host_file)]


@pytest.mark.parametrize("sandbox", ["auto"], indirect=True)
def test_embedding_a_harness_file_fails_in_the_sandbox(
    toolchain: None, gemm: Family, sandbox: str, tmp_path: Path
) -> None:
    source = (PLANTED / "embeds_reference.cu").read_text().replace("PTXBENCH_CHECKOUT", str(ROOT))
    unconfined = _build(gemm, source, tmp_path / "off", "off")
    # Without the sandbox the assembler takes the file in (nothing else sees `.incbin`): the library holds it.
    assert unconfined.passed, unconfined.message
    assert b"ptxbench_gemm" in Path(unconfined.data["host"]).read_bytes()
    assert (TASKS / "reference" / "h100" / "gemm.cu").read_bytes()[:200] in Path(unconfined.data["host"]).read_bytes()
    confined = _build(gemm, source, tmp_path / "auto", sandbox)
    assert confined.status is Status.FAILED
    assert f"Error: file not found: {(TASKS / 'reference' / 'h100' / 'gemm.cu').resolve()}" in confined.message


def test_nvcc_runs_with_a_scrubbed_environment(
    toolchain: None, gemm: Family, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-DPTXBENCH_FROM_THE_ENVIRONMENT")  # nvcc would obey it
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    built = _build(gemm, FROM_THE_ENVIRONMENT, tmp_path / "build")
    assert built.passed, built.message
    scratch = tmp_path / "scratch"
    env = compiler.environment(Path("/opt/cuda/bin/nvcc"), scratch)
    assert set(env) <= {"PATH", "HOME", "TMPDIR", *compiler.KEPT}
    assert env["HOME"] == env["TMPDIR"] == str(scratch) and env["PATH"].startswith("/opt/cuda/bin:")


@pytest.mark.parametrize("sandbox", ["auto"], indirect=True)
def test_the_memory_cap_stops_a_compiler_that_grows(
    toolchain: None, gemm: Family, sandbox: str, tmp_path: Path
) -> None:
    built = _build(gemm, SLOW.read_text(), tmp_path / "build", sandbox, memory=512 << 20)
    assert built.status is Status.FAILED
    assert "out of memory" in built.message and "(each compiler process may map at most 512 MiB)" in built.message
    assert built.data["memory_cap"] == 512 << 20


@MODES
def test_the_timeout_ends_the_whole_tree_and_the_temporary_files_go(
    toolchain: None, gemm: Family, sandbox: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    folder = tmp_path / "build"
    built = _build(gemm, SLOW.read_text(), folder, sandbox, timeout=5)
    assert (built.status, built.message) == (Status.FAILED, "nvcc did not finish within 5 s")
    assert _still_running(_compiling_in(folder)) == []
    assert list(temporary.iterdir()) == []  # nvcc's TMPDIR went with its folder


@MODES
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_the_build_tree_ends_with_the_run(toolchain: None, sandbox: str, how: signal.Signals, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-c", BUILD_SCRIPT, str(TASKS / "gemm.yaml"), str(SLOW), str(tmp_path / "b"), sandbox]
    run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        tree = _tree(run.pid)
        deadline = time.monotonic() + 120
        while not COMPILING & {name for name, _ in tree.values()} and run.poll() is None:
            assert time.monotonic() < deadline, f"the build never reached its compilers: {tree}"
            time.sleep(0.2)
            tree = _tree(run.pid)
        time.sleep(1)  # well into its work: its input files opened
        tree = _tree(run.pid)
        assert run.poll() is None and run.stdout is not None, run.communicate()
        assert "nvcc" in {name for name, _ in tree.values()}, tree
        os.kill(run.pid, how)
        if how is signal.SIGINT:  # the run goes on, its compilers do not
            assert run.stdout.readline() == "interrupted\n"
        else:
            run.wait(timeout=60)
        compiling = {pid: found for pid, found in _compiling_in(tmp_path / "b").items() if pid != run.pid}
        assert _still_running({**tree, **compiling}) == []
    finally:
        run.kill()
        run.communicate()


def _stat(pid: int) -> tuple[str, str, int, int] | None:
    """(name, state, parent, start time) of a process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(errors="replace")
    except OSError:
        return None
    name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
    return name, rest[0], int(rest[1]), int(rest[19])


def _processes() -> dict[int, tuple[str, str, int, int]]:
    found = {int(p.name): _stat(int(p.name)) for p in Path("/proc").iterdir() if p.name.isdigit()}
    return {pid: stat for pid, stat in found.items() if stat is not None}


def _tree(root: int) -> dict[int, tuple[str, int]]:
    """The descendants of `root`: pid → (name, start time)."""
    processes = _processes()
    tree: dict[int, tuple[str, int]] = {}
    parents = {root}
    while parents:
        children = {pid for pid, (_, _, parent, _) in processes.items() if parent in parents} - set(tree)
        tree.update({pid: (processes[pid][0], processes[pid][3]) for pid in children})
        parents = children
    return tree


def _compiling_in(folder: Path) -> dict[int, tuple[str, int]]:
    """The processes whose command line names `folder` (cudafe++ and cicc name the source's full path)."""
    found = {}
    for pid, (name, _, _, start) in _processes().items():
        try:
            if str(folder).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found[pid] = (name, start)
        except OSError:
            continue
    return found


def _still_running(tree: dict[int, tuple[str, int]], patience: float = 3) -> list[str]:
    """The processes of `tree` alive (not zombies, not a later process with a reused id) after `patience`
    seconds: a killed tree is gone in milliseconds, an orphaned compiler lives on (until it fails, seconds
    later, for want of its deleted temporary folder, or a minute later, done)."""
    deadline = time.monotonic() + patience
    while True:
        alive = [
            f"{name} ({pid})"
            for pid, (name, start) in tree.items()
            if (now := _stat(pid)) is not None and now[3] == start and now[1] != "Z"
        ]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def test_the_root_sandbox_shows_only_its_view(tmp_path: Path) -> None:
    system, work, other = tmp_path / "system", tmp_path / "work", tmp_path / "other"
    for folder in (system / "checkout" / "venv", work, other):
        folder.mkdir(parents=True)
    (system / "tool.txt").write_text("public\n")
    (system / "checkout" / "secret.txt").write_text(f"{SECRET}\n")
    (system / "checkout" / "venv" / "lib.txt").write_text("toolkit\n")
    (other / "run.txt").write_text(f"{SECRET}\n")
    (tmp_path / "probe").mkdir()
    (tmp_path / "root").mkdir()
    if not (probe := make_root_sandbox(tmp_path / "probe", compiler.SYSTEM, [])).prefix:
        pytest.skip(f"no sandbox on this machine: {probe.description}")
    # a file a visible folder shows already (the driver library on the command line, in /usr) is shown as it is
    visible = [*compiler.SYSTEM, system, system / "tool.txt", system / "checkout" / "venv"]
    made = make_root_sandbox(tmp_path / "root", visible, [work], [system / "checkout", other])
    assert made.prefix, made.description
    script = (
        f"cat {system}/tool.txt {system}/checkout/venv/lib.txt; pwd; echo made > here.txt;"
        f" for f in {system}/checkout/secret.txt {other}/run.txt {ROOT}/conftest.py /etc/passwd; do"
        f" test -e $f && echo visible: $f; done; touch {system}/x 2>/dev/null || echo read-only"
    )
    done = subprocess.run([*made.prefix, "sh", "-c", script], cwd=work, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.splitlines()) == (0, ["public", "toolkit", str(work.resolve()), "read-only"])
    assert (work / "here.txt").read_text() == "made\n"
    assert made.description.endswith(f"hidden: {system / 'checkout'}")  # `other` was never shown: nothing to hide


def test_messages_about_files_outside_the_view_are_cut(tmp_path: Path) -> None:
    """Recorded nvcc output (gcc's preprocessor, cudafe++, the assembler) about a file outside the view."""
    folder, toolkit = tmp_path / "build", tmp_path / "cuda"
    view = compiler.View((toolkit,), (folder,), ())
    said = (
        "In file included from candidate.cu:9:\n"
        f"/etc/notes.txt:1:3: error: invalid preprocessing directive #{SECRET}\n"
        f"    1 | # {SECRET} a comment line\n"
        "      |   ^~~~~~~~~~~~~~~~~~~~\n"
        f'/etc/notes.txt(2): error: identifier "{SECRET}" is undefined\n'
        f"  int leaked = {SECRET};\n"
        "               ^\n"
        "\n"
        'candidate.cu(12): error: expected a ";"\n'
        "    int x = 1\n"
        "             ^\n"
        f"{toolkit}/include/cuda_bf16.hpp(40): note: declared here\n"
        f"{folder}/cc1.s: Assembler messages:\n"
        f"/etc/notes.txt:3: Error: no such instruction: `{SECRET}'\n"
        "compilation terminated.\n"
    )
    assert compiler.cut_outside(said, view, folder) == (
        "In file included from candidate.cu:9:\n"
        "[messages about /etc/notes.txt cut: outside the candidate's folder and the toolkit]\n"
        'candidate.cu(12): error: expected a ";"\n'
        "    int x = 1\n"
        "             ^\n"
        f"{toolkit}/include/cuda_bf16.hpp(40): note: declared here\n"
        f"{folder}/cc1.s: Assembler messages:\n"
        "[messages about /etc/notes.txt cut: outside the candidate's folder and the toolkit]\n"
    )
