"""External tools (`process.run`): exit status and signal kept, a memory cap on every process, the whole
group killed at the timeout, output that is not UTF-8 decoded with replacement."""

from __future__ import annotations

import time
from pathlib import Path

from pytest_ptxbench import process


def test_the_exit_status_and_a_death_by_signal_are_the_tools_own() -> None:
    assert process.run(["sh", "-c", "exit 42"], 30).returncode == 42  # compute-sanitizer's "found errors"
    assert process.run(["sh", "-c", "kill -SEGV $$"], 30).returncode == -11


def test_a_tool_that_cannot_start_exits_127_with_the_reason() -> None:
    done = process.run(["/no/such/tool", "--version"], 30)
    assert (done.returncode, done.stderr) == (127, "cannot run /no/such/tool: No such file or directory\n")


def test_output_that_is_not_utf8_is_decoded_with_replacement() -> None:
    done = process.run(["sh", "-c", r"printf 'caf\351 \377\n'; printf '\376 error\n' >&2"], 30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "caf\ufffd \ufffd\n", "\ufffd error\n")


def test_the_memory_cap_holds_for_every_process_of_the_tool() -> None:
    assert process.run(["sh", "-c", "sh -c 'ulimit -v'"], 30, memory=256 << 20).stdout == "262144\n"


def test_the_timeout_kills_the_whole_group() -> None:
    done = process.run(["sh", "-c", "sleep 60 & echo $!; wait"], 5)
    assert done.timed_out and done.returncode is None and done.stdout.strip().isdigit(), done
    deadline = time.monotonic() + 3  # SIGKILL sent: the background child goes too, within moments
    while _alive(done.stdout.strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(done.stdout.strip())


def _alive(pid: str) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except FileNotFoundError:
        return False
