"""Anthropic through the `anthropic` SDK's Messages API."""

from __future__ import annotations

from collections.abc import Sequence

from . import Message, Reply


class AnthropicMessages:
    def __init__(self, model: str, api_key: str, base_url: str | None, timeout: float, reply_tokens: int) -> None:
        import anthropic

        self.model = model
        self.reply_tokens = reply_tokens
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    def complete(self, system: str, messages: Sequence[Message]) -> Reply:
        # With an explicit client timeout the SDK accepts a long non-streaming request.
        response = self._client.messages.create(
            model=self.model,
            max_tokens=self.reply_tokens,
            system=system,
            messages=list(messages),  # type: ignore[arg-type]
        )
        text = "".join(block.text for block in response.content if block.type == "text")
        thinking = "\n".join(block.thinking for block in response.content if block.type == "thinking")
        stop = str(response.stop_reason)
        return Reply(
            text=text,
            reasoning=thinking or None,
            refusal=stop if stop == "refusal" else None,
            truncated=stop == "max_tokens",
            stop=stop,
            input_tokens=response.usage.input_tokens,
            output_tokens=response.usage.output_tokens,
        )


def retryable(exc: Exception) -> bool:
    """429, 5xx (529 overloaded included), timeouts and connection errors."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, anthropic.APIConnectionError)
