"""Host-side cheats, both ways: refused by the static allow-list, and (with the allow-list relaxed, the
library called directly) stopped by the evaluation child's sandbox or its reply channel. Each planted
launcher returns cudaSuccess (0) only when its cheat worked; run unconfined first, to show that it does."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_ptxbench.checkout import CheckoutGuard
from pytest_ptxbench.gpu import GpuStages
from pytest_ptxbench.settings import defaults
from pytest_ptxbench.toolchain import find_library
from pytest_ptxbench.workers import Child, ChildFailed, child_environment, make_sandbox

from .conftest import KERNELS, PLANTED, BuildAndInspect

SUCCESS = "0"
RUNNER = """
import ctypes, sys
ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)  # the libcudart the library links
launch = ctypes.CDLL(sys.argv[2]).ptxbench_gemm
launch.argtypes = [ctypes.c_char_p] + [ctypes.c_void_p] * 2 + [ctypes.c_int] * 3 + [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
launch.restype = ctypes.c_int
print(launch(sys.argv[3].encode(), None, None, int(sys.argv[4]), 0, 0, None, 0, None))
"""


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.5)
    yield server
    server.close()


def _library(build_and_inspect: BuildAndInspect, name: str, forbidden: set[str]) -> Path:
    built, inspected = build_and_inspect(PLANTED / name, required=())
    assert inspected is not None and inspected.status.value == "failed"
    assert forbidden <= set(inspected.data["forbidden_imports"]), inspected.message
    return Path(built.data["host"])


def _call(
    library: Path, text: str, number: int, env: dict[str, str], prefix: tuple[str, ...] = (), cwd: Path | None = None
) -> str:
    cudart = find_library("libcudart.so.13")
    assert cudart is not None, "libcudart.so.13 is needed to load the library (the toolchain extra brings it)"
    argv = [*prefix, sys.executable, "-c", RUNNER, str(cudart), str(library), text, str(number)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def sandbox(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The sandbox, the checkout it keeps read-only and the references' folder it hides."""
    checkout, references = tmp_path / "checkout", tmp_path / "references"
    checkout.mkdir()
    references.mkdir()
    made = make_sandbox([checkout], [], [references])
    if not made.prefix:
        pytest.skip(f"no sandbox on this machine: {made.description}")
    return made, checkout, references


def test_reading_an_api_key(
    build_and_inspect: BuildAndInspect, sandbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    library = _library(build_and_inspect, "host_reads_api_key.cu", {"getenv"})
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    assert _call(library, "", 0, dict(os.environ)) == SUCCESS  # unconfined, the key is there
    made, _, _ = sandbox
    assert _call(library, "", 0, child_environment(tmp_path), made.prefix, tmp_path) != SUCCESS


def test_connecting_to_loopback(
    build_and_inspect: BuildAndInspect, sandbox, listening: socket.socket, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    library = _library(build_and_inspect, "host_opens_socket.cu", {"socket", "connect"})
    port = listening.getsockname()[1]
    assert _call(library, "", port, dict(os.environ)) == SUCCESS
    listening.accept()[0].close()
    made, _, _ = sandbox
    assert _call(library, "", port, child_environment(tmp_path), made.prefix, tmp_path) != SUCCESS
    with pytest.raises(TimeoutError):
        listening.accept()  # nothing reached the server


def test_writing_into_the_checkout(build_and_inspect: BuildAndInspect, sandbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    library = _library(build_and_inspect, "host_writes_checkout.cu", {"fopen"})
    made, checkout, references = sandbox
    target = checkout / "conftest.py"
    assert _call(library, str(target), 0, dict(os.environ)) == SUCCESS
    assert target.read_text() == "patched by a candidate\n"
    target.unlink()
    assert _call(library, str(target), 0, child_environment(tmp_path), made.prefix, tmp_path) != SUCCESS
    assert not target.exists()
    assert made.description == (
        f"network and process namespaces; read-only: {checkout.resolve()}; hidden: {references.resolve()}"
    )


def test_reading_a_reference(build_and_inspect: BuildAndInspect, sandbox, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    library = _library(build_and_inspect, "host_reads_reference.cu", {"fopen"})  # fread may be fortified to __fread_chk
    made, _, references = sandbox
    expected = references / "0" / "C.bin"
    expected.parent.mkdir()
    expected.write_bytes(b"\0\0\x80\x3f")
    # directly, and through another process's view of the files (this one's root in /proc)
    paths = [str(expected), f"/proc/{os.getpid()}/root{expected.resolve()}"]
    for path in paths:
        assert _call(library, path, 0, dict(os.environ)) == SUCCESS, path
    for path in paths:
        assert _call(library, path, 0, child_environment(tmp_path), made.prefix, tmp_path) != SUCCESS, path


def test_the_gpu_stages_hide_their_references_from_candidates(tmp_path: Path) -> None:
    settings = {**defaults(), "sandbox": "namespaces"}
    stages = GpuStages(settings, tmp_path)
    try:
        if not stages.sandbox.prefix:
            pytest.skip(f"no sandbox on this machine: {stages.sandbox.description}")
        assert stages.references.is_relative_to(stages.private)
        assert stages.sandbox.description.endswith(f"hidden: {stages.private.resolve()}")
    finally:
        stages.close()


def test_hiding_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"folders to hide must exist: {tmp_path / 'references'}"):
        make_sandbox([], [], [tmp_path / "references"])


def test_a_forged_reply_is_never_taken_for_an_answer(build_and_inspect: BuildAndInspect, tmp_path: Path) -> None:
    library = _library(build_and_inspect, "forges_replies.cu", {"write"})
    cudart = find_library("libcudart.so.13")
    assert cudart is not None, "libcudart.so.13 is needed to load the library (the toolchain extra brings it)"
    child = Child("capture", tmp_path / "child", child_environment(tmp_path / "child"))
    try:
        # the library writes its forged reply while it is loaded, before the child can answer
        with pytest.raises(ChildFailed, match=r"a reply to 'capture' without its request's nonce: something other"):
            child.request(_capture_request(cudart, library), timeout=60)
        assert not child.alive
    finally:
        child.close()


def test_a_hidden_system_call_passes_the_allow_list_and_still_forges_nothing(
    build_and_inspect: BuildAndInspect, tmp_path: Path
) -> None:
    built, inspected = build_and_inspect(PLANTED / "forges_replies_by_a_hidden_syscall.cu", required=())
    assert inspected is not None and inspected.passed, inspected.message  # the static filter is a courtesy
    cudart = find_library("libcudart.so.13")
    assert cudart is not None, "libcudart.so.13 is needed to load the library (the toolchain extra brings it)"
    child = Child("capture", tmp_path / "child", child_environment(tmp_path / "child"))
    try:
        with pytest.raises(ChildFailed, match=r"a reply to 'capture' without its request's nonce: something other"):
            child.request(_capture_request(cudart, Path(built.data["host"])), timeout=60)
        assert not child.alive
    finally:
        child.close()


def test_the_checkout_guard_sees_a_write_where_no_sandbox_stops_it(
    build_and_inspect: BuildAndInspect, tmp_path: Path
) -> None:
    library = _library(build_and_inspect, "host_writes_checkout.cu", {"fopen"})
    checkout = tmp_path / "checkout"
    for folder in ("tasks", "pytest_ptxbench/__pycache__", "runs"):
        (checkout / folder).mkdir(parents=True)
    (checkout / "tasks" / "gemm.yaml").write_text("family: gemm\n")
    guard = CheckoutGuard(checkout, (checkout / "tasks", checkout / "pytest_ptxbench"))
    before = guard.snapshot()
    assert sorted(before) == [str(checkout / "tasks" / "gemm.yaml")]
    for target in ("conftest.py", "tasks/gemm.yaml", "pytest_ptxbench/__pycache__/x.pyc", "runs/r.txt"):
        assert _call(library, str(checkout / target), 0, dict(os.environ)) == SUCCESS
    # new and rewritten files; the byte-code cache and folders outside the watched trees are not evidence
    assert guard.changed(before) == [str(checkout / "conftest.py"), str(checkout / "tasks" / "gemm.yaml")]
    (judged,) = guard.judge(before, [])
    assert (judged.stage, judged.status.value) == ("check", "failed")
    assert judged.data["checkout_changed"] == [str(checkout / "conftest.py"), str(checkout / "tasks" / "gemm.yaml")]
    assert (
        judged.message
        == f"the checkout changed while the candidate ran: {checkout / 'conftest.py'}, {checkout / 'tasks' / 'gemm.yaml'}"
    )
    assert guard.judge(guard.snapshot(), []) == []  # nothing changed: the verdicts as they were


@pytest.mark.parametrize("confined", [False, True], ids=["unconfined", "sandboxed"])
def test_a_candidates_abort_reads_as_sigabrt(
    build_and_inspect: BuildAndInspect, tmp_path: Path, confined: bool
) -> None:
    built, inspected = build_and_inspect(KERNELS / "aborts_when_loaded.cu", required=())
    assert inspected is not None and inspected.passed, inspected.message  # abort() ends only its own child
    prefix: tuple[str, ...] = ()
    if confined:
        made = make_sandbox([], [])
        if not made.prefix:
            pytest.skip(f"no sandbox on this machine: {made.description}")
        prefix = made.prefix
    cudart = find_library("libcudart.so.13")
    assert cudart is not None, "libcudart.so.13 is needed to load the library (the toolchain extra brings it)"
    child = Child("capture", tmp_path / "child", child_environment(tmp_path / "child"), prefix)
    try:
        with pytest.raises(ChildFailed, match=r"the capture child died .*\(signal SIGABRT\)"):
            child.request(_capture_request(cudart, Path(built.data["host"])), timeout=60)
    finally:
        child.close()


def _capture_request(cudart: Path, library: Path) -> dict[str, object]:
    """A capture of no buffers: the library is loaded (its constructors run) before anything is mapped."""
    return {
        "op": "capture",
        "cudart": str(cudart),
        "host": str(library),
        "entry": "ptxbench_gemm",
        "params": [],
        "placements": [],
        "poison": 0xFF,
    }
