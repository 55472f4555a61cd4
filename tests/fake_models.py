"""A fake model server on 127.0.0.1 that speaks the HTTP APIs of OpenAI (and OpenAI-compatible servers),
Anthropic and Gemini, replying from a script. The real SDK clients talk to it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Step:
    """One scripted answer: a reply (text, reasoning, refusal) or an HTTP error, after `delay` seconds."""

    text: str = ""
    status: int = 200
    reasoning: str | None = None
    refusal: str | None = None
    truncated: bool = False  # the reply hit the output-token limit
    delay: float = 0.0
    input_tokens: int = 100
    output_tokens: int = 50


def fenced(source: str, fence: str = "cuda") -> str:
    return f"Here is the kernel.\n\n```{fence}\n{source}\n```\n"


class FakeModelServer:
    """Answers every request with the next step; the last step repeats once the script is used up."""

    def __init__(self, dialect: str, script: list[Step]) -> None:
        self.dialect = dialect
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """What a user passes as --ptx-base-url for this dialect."""
        return self.url + "/v1" if self.dialect == "openai" else self.url

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Step:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                body["_path"] = self.path
                step = server._next(body, {k.lower(): v for k, v in self.headers.items()})
                time.sleep(step.delay)
                status, payload = (
                    (step.status, _error(server.dialect, step.status))
                    if step.status != 200
                    else (200, _reply(server.dialect, body, step))
                )
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def _reply(dialect: str, request: dict[str, Any], step: Step) -> dict[str, Any]:
    usage = (step.input_tokens, step.output_tokens)
    if dialect == "openai":
        message: dict[str, Any] = {"role": "assistant", "content": step.text or None, "refusal": step.refusal}
        if step.reasoning:
            message["reasoning_content"] = step.reasoning
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": "length" if step.truncated else "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)},
        }
    if dialect == "anthropic":
        content: list[dict[str, Any]] = []
        if step.reasoning:
            content.append({"type": "thinking", "thinking": step.reasoning, "signature": "fake"})
        if step.text:
            content.append({"type": "text", "text": step.text})
        stop = "refusal" if step.refusal else "max_tokens" if step.truncated else "end_turn"
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": request.get("model", "fake"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
        }
    parts: list[dict[str, Any]] = []
    if step.reasoning:
        parts.append({"text": step.reasoning, "thought": True})
    if step.text:
        parts.append({"text": step.text})
    finish = "SAFETY" if step.refusal else "MAX_TOKENS" if step.truncated else "STOP"
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": {
            "promptTokenCount": usage[0],
            "candidatesTokenCount": usage[1],
            "totalTokenCount": sum(usage),
        },
        "modelVersion": "fake",
    }


def _error(dialect: str, status: int) -> dict[str, Any]:
    message = "rate limited" if status == 429 else f"server error {status}"
    if dialect == "anthropic":
        kind = "rate_limit_error" if status == 429 else "api_error"
        return {"type": "error", "error": {"type": kind, "message": message}}
    if dialect == "gemini":
        return {"error": {"code": status, "message": message, "status": "RESOURCE_EXHAUSTED"}}
    return {"error": {"message": message, "type": "server_error", "code": None}}


def conversation(request: dict[str, Any]) -> Iterator[str]:
    """The texts of a request's messages, in every dialect."""
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            yield from (block.get("text", "") for block in content)
    for item in request.get("contents", []):
        yield from (part.get("text", "") for part in item.get("parts", []))
