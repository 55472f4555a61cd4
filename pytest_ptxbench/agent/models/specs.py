"""Which model a `--ptx-model` value names, and a ready client for it.

Aliases (`gemini`, `claude`, `gpt`, `qwen`) map to `provider:model`; `--ptx-aliases` overrides them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import Message, MissingKey, ModelClient, Reply
from .retry import with_retries

ALIASES = {
    "gemini": "gemini:gemini-2.5-pro",
    "claude": "anthropic:claude-opus-4-5",
    "gpt": "openai:gpt-5",
    "qwen": "openai-compatible:Qwen/Qwen3-Coder-30B-A3B-Instruct",
}
LOCAL_SERVER = "http://127.0.0.1:8000/v1"  # vLLM's default address


@dataclass(frozen=True)
class Provider:
    sdk: str  # the module that must be importable
    extra: str  # the pip requirement that brings it
    keys: tuple[str, ...]  # environment variables holding the key, first found wins
    key_optional: bool  # a server that needs no key (a local OpenAI-compatible one)
    default_base_url: str | None


PROVIDERS = {
    "openai": Provider("openai", "openai", ("OPENAI_API_KEY",), False, None),
    "openai-compatible": Provider("openai", "openai", ("OPENAI_API_KEY",), True, LOCAL_SERVER),
    "anthropic": Provider("anthropic", "anthropic", ("ANTHROPIC_API_KEY",), False, None),
    "gemini": Provider("google.genai", "google-genai", ("GEMINI_API_KEY", "GOOGLE_API_KEY"), False, None),
}


@dataclass(frozen=True)
class ModelSpec:
    spec: str  # as the user wrote it: "claude"
    provider: str  # "anthropic"
    model: str  # "claude-opus-4-5"
    base_url: str | None

    @property
    def needs_key(self) -> bool:
        """OpenAI at a base URL of the user's choosing (a local server) needs no key either."""
        return not (PROVIDERS[self.provider].key_optional or (self.provider == "openai" and self.base_url))


def parse_spec(spec: str, settings: Mapping[str, Any]) -> ModelSpec | None:
    """The model `spec` names, or None when it names no model provider."""
    aliases = {**ALIASES, **(settings["aliases"] or {})}
    resolved = aliases.get(spec, spec)
    provider, sep, model = resolved.partition(":")
    if not sep or provider not in PROVIDERS:
        return None
    if not model:
        raise ValueError(f"--ptx-model={spec}: no model id after '{provider}:'")
    base_url = settings["base_url"] or PROVIDERS[provider].default_base_url
    return ModelSpec(spec, provider, model, base_url)


def check_sdk(spec: ModelSpec) -> None:
    """ValueError naming what to install when the provider's SDK is missing."""
    provider = PROVIDERS[spec.provider]
    if importlib.util.find_spec(provider.sdk.split(".")[0]) is None or importlib.util.find_spec(provider.sdk) is None:
        raise ValueError(
            f"--ptx-model={spec.spec}: the {spec.provider} provider needs the {provider.extra} package: "
            "pip install 'pytest-ptxbench[models]'"
        )


def api_key(spec: ModelSpec, environ: Mapping[str, str] = os.environ) -> str:
    provider = PROVIDERS[spec.provider]
    for name in provider.keys:
        if environ.get(name):
            return environ[name]
    if not spec.needs_key:
        return "none"  # the SDK insists on some key; a local server ignores it
    raise MissingKey(f"--ptx-model={spec.spec}: set {' or '.join(provider.keys)} to call {spec.provider}")


class RetryingClient:
    """A provider's client whose calls are retried on 429, 5xx, timeouts and connection errors."""

    def __init__(
        self,
        client: ModelClient,
        retryable: Callable[[Exception], bool],
        retries: int,
        delay: float,
        what: str,
    ) -> None:
        self.client, self.retryable, self.retries, self.delay, self.what = client, retryable, retries, delay, what

    def complete(self, system: str, messages: Sequence[Message]) -> Reply:
        return with_retries(
            lambda: self.client.complete(system, messages), self.retryable, self.retries, self.delay, self.what
        )


def connect(spec: ModelSpec, settings: Mapping[str, Any]) -> RetryingClient:
    """A client for `spec`; MissingKey when its API key is not set."""
    key = api_key(spec)
    timeout, tokens = settings["request_timeout"], settings["reply_tokens"]
    client: ModelClient
    if spec.provider in ("openai", "openai-compatible"):
        from . import openai_chat

        compatible = spec.provider == "openai-compatible" or spec.base_url is not None
        client = openai_chat.OpenAIChat(spec.model, key, spec.base_url, timeout, tokens, compatible)
        retryable = openai_chat.retryable
    elif spec.provider == "anthropic":
        from . import anthropic_messages

        client = anthropic_messages.AnthropicMessages(spec.model, key, spec.base_url, timeout, tokens)
        retryable = anthropic_messages.retryable
    else:
        from . import gemini

        client = gemini.Gemini(spec.model, key, spec.base_url, timeout, tokens)
        retryable = gemini.retryable
    what = f"{spec.provider}:{spec.model}"
    return RetryingClient(client, retryable, settings["max_retries"], settings["retry_delay"], what)
