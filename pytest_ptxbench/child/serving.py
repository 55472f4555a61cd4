"""How a child answers: JSON-line requests on stdin, answers on its original stdout (each echoing its
request's nonce), anything else it or the code it runs prints goes to stderr, a log the parent never
parses. `--once FILE` runs a plan of requests from a file instead (for ncu and compute-sanitizer)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import wire

# (request) -> answer; raising one of FATAL ends the child (its CUDA context is no longer usable)
Handler = Callable[[dict[str, Any]], dict[str, Any]]


def answer(handle: Handler, request: dict[str, Any], fatal: tuple[type[Exception], ...]) -> tuple[dict[str, Any], bool]:
    try:
        return {"ok": True, **handle(request)}, False
    except fatal as exc:
        return {"ok": False, "error": str(exc), "error_type": type(exc).__name__, "fatal": True}, True
    except (OSError, ValueError, KeyError, AttributeError, TypeError) as exc:
        error_type = type(exc).__name__
        return {"ok": False, "error": f"{error_type}: {exc}", "error_type": error_type, "fatal": False}, False


def serve(handle: Handler, fatal: tuple[type[Exception], ...]) -> None:
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # printf from native code lands in the log, never in the reply channel
    while (request := wire.receive(sys.stdin)) is not None:
        if request.get("op") == "exit":
            break
        reply, dead = answer(handle, request, fatal)
        wire.send(replies, {**reply, "nonce": request.get("nonce")})  # what a forged line cannot know
        if dead:
            sys.exit(3)


def once(path: Path, handle: Handler, fatal: tuple[type[Exception], ...]) -> None:
    plan = json.loads(path.read_text())
    reply: dict[str, Any] = {"ok": False, "error": "no requests"}
    for request in plan["requests"]:
        reply, _ = answer(handle, request, fatal)
        if not reply["ok"]:
            break
    Path(plan["result"]).write_text(json.dumps(reply))
    sys.exit(0 if reply["ok"] else 3)


def main(handle: Handler, fatal: tuple[type[Exception], ...]) -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--once":
        once(Path(sys.argv[2]), handle, fatal)
    else:
        serve(handle, fatal)
