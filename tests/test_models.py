"""Each provider through its real SDK client against a fake server on 127.0.0.1."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from pytest_ptxbench.agent.models import MissingKey, ModelError, Reply
from pytest_ptxbench.agent.models.prices import cost
from pytest_ptxbench.agent.models.retry import with_retries
from pytest_ptxbench.agent.models.specs import ALIASES, RetryingClient, api_key, connect, parse_spec

from .fake_models import FakeModelServer, Step, conversation
from .model_settings import model_settings

SYSTEM = "You write CUDA kernels."
SECRET = "sk-test-secret-0123456789"
PROVIDERS = {  # spec → (fake server dialect, SDK module, key variable)
    "openai:gpt-test": ("openai", "openai", "OPENAI_API_KEY"),
    "openai-compatible:Qwen/Qwen-test": ("openai", "openai", None),
    "anthropic:claude-test": ("anthropic", "anthropic", "ANTHROPIC_API_KEY"),
    "gemini:gemini-test": ("gemini", "google.genai", "GEMINI_API_KEY"),
}

Connect = Callable[..., tuple[RetryingClient, FakeModelServer]]


@pytest.fixture(params=list(PROVIDERS))
def provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    _, module, key = PROVIDERS[request.param]
    pytest.importorskip(module, reason=f"the {module} SDK is not installed (pip install 'pytest-ptxbench[models]')")
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    if key:
        monkeypatch.setenv(key, SECRET)
    return str(request.param)


@pytest.fixture
def serve(provider: str) -> Callable[..., tuple[RetryingClient, FakeModelServer]]:
    servers: list[FakeModelServer] = []

    def start(script: list[Step], **settings: object) -> tuple[RetryingClient, FakeModelServer]:
        server = FakeModelServer(PROVIDERS[provider][0], script).__enter__()
        servers.append(server)
        resolved = model_settings(base_url=server.base_url, **settings)
        spec = parse_spec(provider, resolved)
        assert spec is not None
        return connect(spec, resolved), server

    yield start  # type: ignore[misc]
    for server in servers:
        server.__exit__()


def ask(client: RetryingClient) -> Reply:
    return client.complete(SYSTEM, [{"role": "user", "content": "the task card"}])


def test_normal_exchange(provider: str, serve: Connect) -> None:
    client, server = serve([Step("```cuda\nkernel\n```", reasoning="tiles of 128", input_tokens=321, output_tokens=45)])
    reply = client.complete(
        SYSTEM,
        [
            {"role": "user", "content": "the task card"},
            {"role": "assistant", "content": "a first kernel"},
            {"role": "user", "content": "build failed"},
        ],
    )
    assert reply == Reply("```cuda\nkernel\n```", "tiles of 128", None, False, reply.stop, 321, 45)
    (request,) = server.requests
    assert list(conversation(request))[-3:] == ["the task card", "a first kernel", "build failed"]
    assert SYSTEM in str(request)
    assert "test" in (request.get("model") or request["_path"])  # the model id reached the server
    if PROVIDERS[provider][2]:  # the key from the environment went to the provider, nowhere else
        assert SECRET in str(server.headers[0])


def test_refusal_and_truncation_are_reported(provider: str, serve: Connect) -> None:
    client, _ = serve([Step("", refusal="I can't help with that."), Step("```cuda\nint x", truncated=True)])
    refused = ask(client)
    assert refused.refusal and not refused.text
    cut = ask(client)
    assert cut.truncated and cut.refusal is None and cut.text == "```cuda\nint x"


def test_429_then_success(provider: str, serve: Connect) -> None:
    client, server = serve([Step(status=429), Step("ok")], max_retries=2)
    assert ask(client).text == "ok"
    assert len(server.requests) == 2


def test_500_until_give_up(provider: str, serve: Connect) -> None:
    client, server = serve([Step(status=500)], max_retries=2)
    with pytest.raises(ModelError, match=r"500.*\(gave up after 3 attempts\)"):
        ask(client)
    assert len(server.requests) == 3


def test_no_retries_allowed_says_so(provider: str, serve: Connect) -> None:
    client, server = serve([Step(status=503)], max_retries=0)
    with pytest.raises(ModelError, match=r"503.*\(--ptx-max-retries=0: not retried\)$"):
        ask(client)
    assert len(server.requests) == 1


def test_a_client_error_is_not_retried(provider: str, serve: Connect) -> None:
    client, server = serve([Step(status=400)], max_retries=3)
    with pytest.raises(ModelError, match="400"):
        ask(client)
    assert len(server.requests) == 1


def test_slow_server_hits_the_timeout(provider: str, serve: Connect) -> None:
    client, server = serve([Step("late", delay=3.0)], request_timeout=0.5, max_retries=1)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"(?i)time.*\(gave up after 2 attempts\)"):
        ask(client)
    assert time.monotonic() - started < 2.9
    assert len(server.requests) == 2


def test_missing_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings = model_settings()
    for spec, message in [
        ("claude", "--ptx-model=claude: set ANTHROPIC_API_KEY to call anthropic"),
        ("gemini", "--ptx-model=gemini: set GEMINI_API_KEY or GOOGLE_API_KEY to call gemini"),
        ("gpt", "--ptx-model=gpt: set OPENAI_API_KEY to call openai"),
    ]:
        parsed = parse_spec(spec, settings)
        assert parsed is not None
        with pytest.raises(MissingKey) as caught:
            api_key(parsed)
        assert str(caught.value) == message
    local = parse_spec("qwen", settings)  # a local OpenAI-compatible server needs none
    assert local is not None and local.base_url == "http://127.0.0.1:8000/v1" and api_key(local) == "none"
    monkeypatch.setenv("GOOGLE_API_KEY", "g")
    gemini = parse_spec("gemini", settings)
    assert gemini is not None and api_key(gemini) == "g"


def test_specs_aliases_and_overrides() -> None:
    settings = model_settings()
    assert {a: f"{s.provider}:{s.model}" for a in ALIASES if (s := parse_spec(a, settings))} == ALIASES
    overridden = parse_spec("claude", model_settings(aliases={"claude": "anthropic:claude-other"}))
    assert overridden is not None and overridden.model == "claude-other"
    assert parse_spec("ollama:llama", settings) is None
    assert parse_spec("reference", settings) is None
    with pytest.raises(ValueError, match="no model id after 'openai:'"):
        parse_spec("openai:", settings)


def test_cost_from_the_price_table_and_overrides() -> None:
    assert cost("gpt-5", 1_000_000, 100_000, None) == pytest.approx(1.25 + 1.0)
    assert cost("my-local-model", 1000, 1000, None) is None  # unknown: no cost, not a guess
    assert cost("my-local-model", 2_000_000, 0, {"my-local-model": [0.5, 1.0]}) == pytest.approx(1.0)


def test_backoff_doubles_and_is_bounded() -> None:
    waits: list[float] = []
    attempts = iter([ConnectionError("down")] * 8)

    def flaky() -> str:
        raise next(attempts)

    with pytest.raises(ModelError, match="gave up after 8 attempts"):
        with_retries(flaky, lambda e: isinstance(e, ConnectionError), 7, 10.0, "test", sleep=waits.append)
    assert waits == [10.0, 20.0, 40.0, 60.0, 60.0, 60.0, 60.0]
