"""Google Gemini through the `google-genai` SDK."""

from __future__ import annotations

from collections.abc import Sequence

from . import Message, Reply

# Finish reasons by which Gemini says it withheld the answer.
_DECLINED = {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "LANGUAGE"}


class Gemini:
    def __init__(self, model: str, api_key: str, base_url: str | None, timeout: float, reply_tokens: int) -> None:
        from google import genai
        from google.genai import types

        self.model = model
        self.reply_tokens = reply_tokens
        # No retry_options: the SDK does not retry, `with_retries` does.
        options = types.HttpOptions(base_url=base_url, timeout=round(timeout * 1000))
        self._client = genai.Client(api_key=api_key, http_options=options)

    def complete(self, system: str, messages: Sequence[Message]) -> Reply:
        from google.genai import types

        contents = [
            types.Content(role="model" if m["role"] == "assistant" else "user", parts=[types.Part(text=m["content"])])
            for m in messages
        ]
        config = types.GenerateContentConfig(system_instruction=system, max_output_tokens=self.reply_tokens)
        response = self._client.models.generate_content(model=self.model, contents=contents, config=config)
        candidate = response.candidates[0] if response.candidates else None
        parts = (candidate.content.parts if candidate and candidate.content else None) or []
        text = "".join(p.text for p in parts if p.text and not p.thought)
        thoughts = "\n".join(p.text for p in parts if p.text and p.thought)
        finish = candidate.finish_reason.value if candidate and candidate.finish_reason else "NONE"
        blocked = response.prompt_feedback.block_reason if response.prompt_feedback else None
        usage = response.usage_metadata
        return Reply(
            text=text,
            reasoning=thoughts or None,
            refusal=f"blocked: {blocked.value}" if blocked else finish if finish in _DECLINED else None,
            truncated=finish == "MAX_TOKENS",
            stop=finish,
            input_tokens=(usage.prompt_token_count or 0) if usage else 0,
            output_tokens=((usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)) if usage else 0,
        )


def retryable(exc: Exception) -> bool:
    """429, 5xx, timeouts and connection errors (the SDK's HTTP client's transport errors)."""
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        return exc.code == 429 or exc.code >= 500
    return any(cls.__name__ == "TransportError" and cls.__module__.startswith("httpx") for cls in type(exc).__mro__)
