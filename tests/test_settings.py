"""Option precedence: marker > command line > environment > ini > default, in one place."""

from __future__ import annotations

import pytest

from pytest_ptxbench import settings


@pytest.fixture
def configured(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def make(*args: str, ini: str = "", env: dict[str, str] | None = None) -> pytest.Config:
        project.makeini(f"[pytest]\n{ini}\n")
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        return project.parseconfig(*args)

    return make


def test_defaults(configured) -> None:  # type: ignore[no-untyped-def]
    resolved = settings.resolve_all(configured())
    assert resolved == {
        "model": "reference",
        "gpu": "h100",
        "lang": "cuda",
        "turns": 8,
        "runs": 50,
        "warmup": 10,
        "baseline": None,
        "trajectories": 1,
        "shapes": "all",
        "shapes_file": None,
        "tasks": None,
        "seed": 0,
        "out": None,
        "require_gpu": False,
        "build_timeout": 300,
        "sandbox": "auto",
        "call_timeout": 120,
        "base_url": None,
        "aliases": None,
        "prices": None,
        "request_timeout": 600.0,
        "max_retries": 4,
        "retry_delay": 2.0,
        "reply_tokens": 32768,
        "spend_cap": None,
        "token_cap": None,
        "target_speedup": None,
        "resume": False,
    }


def test_each_source_overrides_the_next(configured) -> None:  # type: ignore[no-untyped-def]
    config = configured(
        "--ptx-runs=20",
        ini="ptx_runs = 40\nptx_seed = 3\nptx_turns = 2",
        env={"PTXBENCH_RUNS": "30", "PTXBENCH_SEED": "4"},
    )
    assert settings.resolve(config, "runs", {"runs": 10}) == 10  # marker
    assert settings.resolve(config, "runs") == 20  # command line
    assert settings.resolve(config, "seed") == 4  # environment
    assert settings.resolve(config, "turns") == 2  # ini
    assert settings.resolve(config, "warmup") == 10  # default


def test_baseline_precedence(configured) -> None:  # type: ignore[no-untyped-def]
    config = configured(ini="ptx_baseline = from_ini")
    assert settings.resolve(config, "baseline") == "from_ini"
    config = configured(ini="ptx_baseline = from_ini", env={"PTXBENCH_BASELINE": "from_env"})
    assert settings.resolve(config, "baseline") == "from_env"
    config = configured("--ptx-baseline=flashinfer", ini="ptx_baseline = from_ini", env={"PTXBENCH_BASELINE": "x"})
    assert settings.resolve(config, "baseline") == "flashinfer"
    assert settings.resolve(config, "baseline", {"baseline": "default"}) == "default"
    with pytest.raises(pytest.UsageError, match=r"PTXBENCH_BASELINE='flash infer': expected a name"):
        settings.resolve(configured(env={"PTXBENCH_BASELINE": "flash infer"}), "baseline")


def test_flags(configured) -> None:  # type: ignore[no-untyped-def]
    assert settings.resolve(configured("--ptx-require-gpu"), "require_gpu") is True
    assert settings.resolve(configured(ini="ptx_require_gpu = true"), "require_gpu") is True
    assert settings.resolve(configured(ini="ptx_require_gpu = false"), "require_gpu") is False
    assert (
        settings.resolve(configured(ini="ptx_require_gpu = false", env={"PTXBENCH_REQUIRE_GPU": "yes"}), "require_gpu")
        is True
    )


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (("--ptx-runs=0",), {}, "--ptx-runs='0': must be at least 1"),
        (("--ptx-gpu=a100",), {}, "--ptx-gpu='a100': expected one of h100, b200, all"),
        ((), {"PTXBENCH_SHAPES": "some"}, "PTXBENCH_SHAPES='some': expected one of visible, hidden, all"),
        ((), {"PTXBENCH_SEED": "x"}, "PTXBENCH_SEED='x': invalid literal for int()"),
        (("--ptx-spend-cap=0",), {}, "--ptx-spend-cap='0': must be greater than 0"),
        (("--ptx-aliases=claude",), {}, "--ptx-aliases='claude': expected name=value pairs, got 'claude'"),
        (("--ptx-aliases=claude=opus",), {}, "--ptx-aliases='claude=opus': claude=opus: expected provider:model"),
        (
            (),
            {"PTXBENCH_PRICES": "m=1"},
            "PTXBENCH_PRICES='m=1': m=1: expected <USD per 1M input tokens>/<USD per 1M output tokens>",
        ),
    ],
)
def test_bad_values_name_their_source(configured, args: tuple[str, ...], env: dict[str, str], message: str) -> None:  # type: ignore[no-untyped-def]
    config = configured(*args, env=env)
    with pytest.raises(pytest.UsageError) as caught:
        settings.resolve_all(config)
    assert message in str(caught.value)


def test_unknown_marker_setting(configured) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(pytest.UsageError, match="unknown setting 'rounds'"):
        settings.resolve_all(configured(), {"rounds": 3})


def test_a_marker_sets_only_per_test_settings(configured) -> None:  # type: ignore[no-untyped-def]
    assert settings.resolve_all(configured(), {"runs": 7, "call_timeout": 9})["runs"] == 7
    with pytest.raises(pytest.UsageError, match="'model' holds for the whole session"):
        settings.resolve_all(configured(), {"model": "reference"})


def test_model_options_parse(configured) -> None:  # type: ignore[no-untyped-def]
    config = configured(
        "--ptx-aliases=claude=anthropic:claude-x, qwen=openai-compatible:Qwen/Q",
        "--ptx-resume",
        ini="ptx_prices = my-model=0.5/2 other=1/4\nptx_target_speedup = 1.1",
    )
    resolved = settings.resolve_all(config)
    assert resolved["aliases"] == {"claude": "anthropic:claude-x", "qwen": "openai-compatible:Qwen/Q"}
    assert resolved["prices"] == {"my-model": [0.5, 2.0], "other": [1.0, 4.0]}
    assert resolved["target_speedup"] == 1.1 and resolved["resume"] is True
