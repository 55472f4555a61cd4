"""OpenAI and OpenAI-compatible servers (vLLM, SGLang, OpenRouter, Together) through the `openai` SDK's
Chat Completions API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import Message, Reply


class OpenAIChat:
    def __init__(
        self, model: str, api_key: str, base_url: str | None, timeout: float, reply_tokens: int, compatible: bool
    ) -> None:
        import openai

        self.model = model
        self.reply_tokens = reply_tokens
        self.compatible = compatible
        self._client = openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0)

    def complete(self, system: str, messages: Sequence[Message]) -> Reply:
        # Servers that mimic the API know `max_tokens`; OpenAI's reasoning models only `max_completion_tokens`.
        limit: dict[str, Any] = (
            {"max_tokens": self.reply_tokens} if self.compatible else {"max_completion_tokens": self.reply_tokens}
        )
        response = self._client.chat.completions.create(
            model=self.model,
            messages=[{"role": "system", "content": system}, *messages],  # type: ignore[list-item]
            **limit,
        )
        choice = response.choices[0]
        message = choice.message
        extra = message.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")  # vLLM, SGLang, OpenRouter
        usage = response.usage
        return Reply(
            text=message.content or "",
            reasoning=reasoning if isinstance(reasoning, str) else None,
            refusal=message.refusal or None,
            truncated=choice.finish_reason == "length",
            stop=str(choice.finish_reason),
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
        )


def retryable(exc: Exception) -> bool:
    """429, 5xx, timeouts and connection errors."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return isinstance(exc, openai.APIConnectionError)  # timeouts included
