"""Model providers behind one small interface: a system prompt and a conversation in, a `Reply` out.

Each provider module wraps its official SDK, imported only when a client is made, so importing
pytest_ptxbench never imports an SDK. Keys come from the environment and go nowhere but the SDK.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypedDict


class Message(TypedDict):
    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class Reply:
    """What one model call returned."""

    text: str
    reasoning: str | None  # reasoning / thinking content, when the provider returned it
    refusal: str | None  # the provider's own signal that the model declined
    truncated: bool  # the reply stopped at the output-token limit
    stop: str  # the provider's finish reason, as it named it
    input_tokens: int
    output_tokens: int


class ModelClient(Protocol):
    def complete(self, system: str, messages: Sequence[Message]) -> Reply: ...


class ModelError(Exception):
    """A model call that failed for good: not retryable, or out of retries."""


class MissingKey(Exception):
    """The provider's API key is not in the environment; the message names the variable."""
