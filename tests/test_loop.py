"""The model agent's loop in-process: a fake OpenAI-compatible server, the real SDK, and (where the test
is about verdicts) the real build and inspect stages."""

from __future__ import annotations

import ctypes
import json
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_ptxbench.agent import NoKernel, feedback
from pytest_ptxbench.agent.loop import ModelAgent
from pytest_ptxbench.agent.models.specs import parse_spec
from pytest_ptxbench.agent.replay import ReplayAgent
from pytest_ptxbench.candidate import Candidate
from pytest_ptxbench.device import missing_device, parse_devices
from pytest_ptxbench.languages import CUDA, LANGUAGES, Language
from pytest_ptxbench.parsers import ncu
from pytest_ptxbench.pipeline import Pipeline
from pytest_ptxbench.rundir import RunDirectory
from pytest_ptxbench.stages import check, profile, timing
from pytest_ptxbench.targets import TARGETS
from pytest_ptxbench.task.catalogue import Family
from pytest_ptxbench.verdict import STAGES, Status, Verdict
from pytest_ptxbench.workers import Child, ChildFailed, child_environment, make_sandbox

from .conftest import DATA, KERNELS, REFERENCE_GEMM, ROOT, TASKS, BuildAndInspect
from .fake_models import FakeModelServer, Step, conversation, fenced
from .model_settings import model_settings

pytest.importorskip("openai", reason="the openai SDK is not installed (pip install 'pytest-ptxbench[models]')")

H100 = TARGETS["h100"]
SECRET = "sk-test-secret-0123456789"


def kernel(name: str) -> str:
    return (KERNELS / name).read_text()


@pytest.fixture(autouse=True)
def secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)


class Rig:
    """A run directory, a model agent for `openai:fake-model` at a fake server, and the real pipeline."""

    def __init__(self, run: Path, server: FakeModelServer, family: Family, **settings: Any) -> None:
        self.run, self.server, self.family = run, server, family
        self.settings = model_settings(model="openai:fake-model", base_url=server.base_url, out=str(run), **settings)
        self.pipeline = Pipeline(RunDirectory(run), lambda: [], self.settings)
        spec = parse_spec("openai:fake-model", self.settings)
        assert spec is not None
        self.agent = ModelAgent(spec, self.settings, run)
        self.task = family.tasks[0]

    def judge(self, candidate: Candidate) -> list[Verdict]:
        return self.pipeline.evaluate(candidate, self.family, self.task, H100, self.family.shapes("visible"))

    def kernel(
        self,
        trajectory: int = 1,
        judge: Callable[[Candidate], list[Verdict]] | None = None,
        language: Language = CUDA,
    ) -> Any:
        return self.agent.kernel(self.family, self.task, H100, trajectory, judge or self.judge, language)

    def trajectory(self, trajectory: int = 1, lang: str = "") -> dict[str, Any]:
        path = self.run / "trajectories" / f"{self.task.name}-h100{lang}-t{trajectory}.json"
        record: dict[str, Any] = json.loads(path.read_text())
        return record


@pytest.fixture
def rig(tmp_path: Path, gemm: Family, toolchain: None) -> Iterator[Callable[..., Rig]]:
    servers: list[FakeModelServer] = []

    def make(script: list[Step], run: str = "run", **settings: Any) -> Rig:
        server = FakeModelServer("openai", script).__enter__()
        servers.append(server)
        return Rig(tmp_path / run, server, gemm, **settings)

    yield make
    for server in servers:
        server.__exit__()


def statuses(turn: dict[str, Any]) -> list[tuple[str, str]]:
    return [(v["stage"], v["status"]) for v in turn["verdicts"]]


def test_a_triton_trajectory_through_build_and_inspect(rig: Callable[..., Rig]) -> None:
    """The same loop for Triton: the prompt states the Triton contract, the ```python block is taken, the kernel
    is saved as .py and judged by Triton's build and the cubin inspect (no descriptors: no UTMALDG)."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[toolchain]')")
    without = (KERNELS / "planted" / "triton_gemm_without_descriptors.py").read_text()
    reference = (TASKS / "reference" / "h100" / "gemm.py").read_text()
    script = [Step(fenced(REFERENCE_GEMM)), Step(fenced(without, "python")), Step(fenced(reference, "python"))]
    r = rig(script, turns=3)
    result = r.kernel(language=LANGUAGES["triton"])
    assert isinstance(result, Candidate) and result.lang == "triton"
    assert result.source.strip() == reference.strip()
    record = r.trajectory(lang="-triton")
    assert record["info"]["ptxbench"]["lang"] == "triton"
    one, two, three = record["turns"]
    assert one["verdicts"] == [] and one["problem"] == "the code is in ```cuda, not in a ```python block"
    assert statuses(two) == [("build", "passed"), ("inspect", "failed")]
    assert "missing UTMALDG" in two["verdicts"][1]["message"]
    assert statuses(three)[:2] == [("build", "passed"), ("inspect", "passed")]
    assert all(turn["kernel"].endswith(".py") for turn in (two, three))
    system, card = (m["content"] for m in record["messages"][:2])
    assert "Triton kernels for" in system and "`run(...)`" in system and "extern" not in system
    assert "def run(A, B, C, M, N, K, workspace) -> None" in card and "```python" in card
    assert "## Host rules" not in card  # the allow-list is for CUDA host code
    told = list(conversation(r.server.requests[1]))[-1]
    assert "not in a ```python block" in told and "Reply with the whole .py file in one ```python block" in told


def test_three_turns_through_build_and_inspect(rig: Callable[..., Rig]) -> None:
    script = [
        Step(fenced(kernel("syntax_error.cu"))),
        Step(fenced(kernel("launcher_getenv.cu"))),
        Step(fenced(REFERENCE_GEMM)),
    ]
    r = rig(script, turns=3)
    result = r.kernel()
    assert isinstance(result, Candidate) and result.source.strip() == REFERENCE_GEMM.strip()
    assert result.origin == "openai:fake-model gemm-n128-k2048-h100-t1 turn 3"

    record = r.trajectory()
    one, two, three = record["turns"]
    assert statuses(one) == [("build", "failed")]
    assert 'error: expected a ";"' in one["verdicts"][0]["message"]
    assert statuses(two) == [("build", "passed"), ("inspect", "failed")]
    assert two["verdicts"][1]["data"]["forbidden_imports"] == ["getenv"]
    assert statuses(three) == [("build", "passed"), ("inspect", "passed")] + [(s, "skipped") for s in STAGES[2:]]
    # the model saw each turn's feedback, rendered from those verdicts
    second, third = (list(conversation(r.server.requests[i])) for i in (1, 2))
    assert 'build failed: nvcc exited 2:\ncandidate.cu(6): error: expected a ";"' in second[-1]
    assert "host code imports symbols outside the allow-list: getenv" in third[-1]
    assert third[-4] == second[-2] and len(third) == len(second) + 2  # history kept, nothing repeated

    assert record["trajectory_format"] == "mini-swe-agent-1"
    info = record["info"]
    assert info["exit_status"] == "turns used" and info["submission"].strip() == REFERENCE_GEMM.strip()
    assert info["model_stats"] == {"instance_cost": None, "api_calls": 3}  # fake-model has no price
    assert info["ptxbench"]["best_turn"] == 3 and info["ptxbench"]["budgets"] == {"1": 1}
    assert info["ptxbench"]["tokens"] == {"input": 300, "output": 150}
    assert [m["role"] for m in record["messages"]] == ["system", "user"] + ["assistant", "user"] * 3
    for turn in record["turns"]:
        saved = r.run / turn["kernel"]
        assert saved.is_file() and turn["sha256"] in saved.name and turn["model_seconds"] >= 0
    assert not [p for p in r.run.rglob("*") if p.is_file() and SECRET in p.read_text(errors="replace")]


def test_replies_without_a_kernel_are_counted_turns(rig: Callable[..., Rig]) -> None:
    script = [
        Step("", refusal="I can't help with that."),
        Step(fenced(kernel("wgmma_bf16.cu"), fence="python")),
        Step("```cuda\n" + kernel("wgmma_bf16.cu")[:300], truncated=True),
    ]
    r = rig(script, turns=3)
    result = r.kernel()
    assert isinstance(result, NoKernel)
    assert result.failed and result.reason.startswith(
        "openai:fake-model: the model gave no kernel in 3 turn(s) (turns used; last: the ```cuda block is not closed"
    )
    problems = [t["problem"] for t in r.trajectory()["turns"]]
    assert problems == [
        "the reply declined (I can't help with that.) and holds no kernel",
        "the code is in ```python, not in a ```cuda block",
        "the ```cuda block is not closed: the code is incomplete (the reply stopped at the output-token limit)",
    ]
    feedback = list(conversation(r.server.requests[2]))[-1]
    assert feedback.startswith("No kernel was evaluated: the code is in ```python")
    assert 'extern "C" cudaError_t ptxbench_gemm(' in feedback
    assert len(r.server.requests) == 3


@pytest.mark.parametrize(
    ("settings", "status"),
    [
        ({"spend_cap": 0.2, "prices": {"fake-model": [1000.0, 1000.0]}}, "spend cap reached ($0.3000 of $0.2)"),
        ({"token_cap": 200}, "token cap reached (300 of 200 tokens)"),
    ],
)
def test_a_cap_stops_the_run(rig: Callable[..., Rig], settings: dict[str, Any], status: str) -> None:
    r = rig([Step("no code yet")], turns=8, **settings)
    r.kernel()
    record = r.trajectory()
    assert record["info"]["exit_status"] == status and len(record["turns"]) == 2
    second = r.kernel(trajectory=2)  # the cap holds for the whole run: never tried, so skipped, not failed
    assert second == NoKernel(f"openai:fake-model: not tried: {status}", failed=False)
    assert not (r.run / "trajectories" / "gemm-n128-k2048-h100-t2.json").exists()
    assert len(r.server.requests) == 2
    assert len((r.run / "model-usage.jsonl").read_text().splitlines()) == 2


def test_resume_after_an_interruption_loses_and_repeats_no_turn(rig: Callable[..., Rig]) -> None:
    script = [Step(fenced(kernel(name))) for name in ("syntax_error.cu", "wgmma_bf16.cu", "launcher_getenv.cu")]
    r = rig(script, turns=3)
    judged: list[str] = []

    def interrupted(candidate: Candidate) -> list[Verdict]:
        if judged:
            raise KeyboardInterrupt  # Ctrl-C while the second kernel builds
        judged.append(candidate.digest)
        return r.judge(candidate)

    with pytest.raises(KeyboardInterrupt):
        r.kernel(judge=interrupted)
    saved = r.trajectory()
    assert saved["info"]["exit_status"] == "running"
    assert [t["verdicts"] is not None for t in saved["turns"]] == [True, False]  # turn 2 replied, not judged
    assert (r.run / saved["turns"][1]["kernel"]).is_file()

    r.settings["resume"] = True
    r.kernel()
    record = r.trajectory()
    assert [t["turn"] for t in record["turns"]] == [1, 2, 3]
    assert [statuses(t)[-1] for t in record["turns"]] == [
        ("build", "failed"),
        ("inspect", "failed"),
        ("inspect", "failed"),
    ]
    assert len(r.server.requests) == 3  # turn 2's reply was judged, not asked for again
    replies = [m for m in conversation(r.server.requests[2]) if m.startswith("Here is the kernel")]
    assert len(replies) == 2


def passing(speedups: list[float]) -> Callable[[Candidate], list[Verdict]]:
    """A stand-in for the GPU pipeline: every stage passes, `time` reports the next speedup."""
    queue = iter(speedups)

    def judge(candidate: Candidate) -> list[Verdict]:
        verdicts = [Verdict(stage, Status.PASSED, "ok") for stage in STAGES[:-1]]
        return [*verdicts, Verdict("time", Status.PASSED, "timed", {"speedup": next(queue), "median_ms": 1.0})]

    return judge


def test_best_kernel_by_speedup_and_per_budget(rig: Callable[..., Rig]) -> None:
    r = rig([Step(fenced(kernel("wgmma_bf16.cu").replace("0.f", f"{i}.f"))) for i in range(5)], turns=5)
    result = r.kernel(judge=passing([0.5, 1.3, 0.9, 0.7, 1.1]))
    ptxbench = r.trajectory()["info"]["ptxbench"]
    assert ptxbench["best_turn"] == 2 and ptxbench["budgets"] == {"1": 1, "4": 2}
    assert isinstance(result, Candidate) and result.origin.endswith("turn 2")


def test_early_stop_at_the_target_speedup(rig: Callable[..., Rig]) -> None:
    r = rig([Step(fenced(kernel("wgmma_bf16.cu").replace("0.f", f"{i}.f"))) for i in range(3)], target_speedup=1.0)
    r.kernel(judge=passing([0.8, 1.05, 2.0]))
    record = r.trajectory()
    assert record["info"]["exit_status"] == "target speedup reached" and len(record["turns"]) == 2
    assert len(r.server.requests) == 2


def test_a_failing_trajectory_does_not_raise(rig: Callable[..., Rig]) -> None:
    r = rig([Step(fenced(kernel("wgmma_bf16.cu")))], turns=2)

    def broken(candidate: Candidate) -> list[Verdict]:
        raise RuntimeError("disk full")

    result = r.kernel(judge=broken)
    assert isinstance(result, NoKernel) and result.failed
    assert "openai:fake-model: harness error after 1 turn(s): RuntimeError: disk full; see " in result.reason
    assert r.trajectory()["info"]["ptxbench"]["error"] == "RuntimeError: disk full"


def test_a_provider_error_is_the_result_not_an_earlier_turns_build_error(rig: Callable[..., Rig]) -> None:
    r = rig([Step(fenced(kernel("syntax_error.cu"))), Step(status=503)], turns=4, max_retries=1)
    result = r.kernel()
    info = r.trajectory()["info"]
    assert info["exit_status"] == "provider error" and "503" in info["ptxbench"]["error"]
    assert isinstance(result, NoKernel) and result.failed
    assert result.reason.startswith(
        "openai:fake-model: provider error at turn 2: openai:fake-model: InternalServerError: Error code: 503"
    )
    assert "(gave up after 2 attempts); the best kernel before it (turn 1) failed build; see " in result.reason
    assert "nvcc" not in result.reason
    assert len(r.server.requests) == 3


def test_a_provider_error_ends_the_trajectory_with_a_kernel_that_failed_no_stage(rig: Callable[..., Rig]) -> None:
    r = rig([Step(fenced(REFERENCE_GEMM)), Step(status=503)], turns=4, max_retries=0)
    result = r.kernel(judge=passing([0.8]))
    assert r.trajectory()["info"]["exit_status"] == "provider error"
    assert isinstance(result, Candidate) and result.origin.endswith("turn 1")


def test_without_a_gpu_the_trajectory_ends_at_the_first_kernel_that_passes_what_can_run(
    rig: Callable[..., Rig],
) -> None:
    """Later turns could only resend a kernel nobody can judge further here: no model call is spent on them."""
    script = [Step(fenced(kernel("syntax_error.cu"))), Step(fenced(REFERENCE_GEMM)), Step(fenced(REFERENCE_GEMM))]
    r = rig(script, turns=6)
    result = r.kernel()
    record = r.trajectory()
    assert len(r.server.requests) == 2 and len(record["turns"]) == 2
    assert record["info"]["exit_status"] == (
        "passed every stage that can run here (check skipped: needs an sm_90 device (H100-class), found none)"
    )
    assert isinstance(result, Candidate) and result.origin.endswith("turn 2")


def test_a_gpu_stage_that_ran_keeps_the_trajectory_going(rig: Callable[..., Rig]) -> None:
    """No stage failed, yet the profiler was unavailable while the kernel ran and was timed: the model can
    still make it faster, so the turns go on."""

    def judge(candidate: Candidate) -> list[Verdict]:
        ran = [Verdict(stage, Status.PASSED, "ok") for stage in STAGES]
        return [*ran[:3], Verdict("profile", Status.TOOL_UNAVAILABLE, "requires ncu, found none"), *ran[4:]]

    r = rig([Step(fenced(kernel("wgmma_bf16.cu").replace("0.f", f"{i}.f"))) for i in range(3)], turns=3)
    r.kernel(judge=judge)
    assert r.trajectory()["info"]["exit_status"] == "turns used" and len(r.server.requests) == 3


def test_replay_reproduces_the_verdicts(rig: Callable[..., Rig], tmp_path: Path) -> None:
    script = [Step(fenced(kernel("syntax_error.cu"))), Step("no code"), Step(fenced(kernel("launcher_getenv.cu")))]
    r = rig(script, turns=3)
    r.kernel()
    replay = ReplayAgent.open(f"replay:{r.run}", tmp_path / "again")
    again = Pipeline(RunDirectory(tmp_path / "again"), lambda: [], r.settings)
    result = replay.kernel(
        r.family, r.task, H100, 1, lambda c: again.evaluate(c, r.family, r.task, H100, r.family.shapes("visible"))
    )
    assert isinstance(result, Candidate) and result.source == kernel("launcher_getenv.cu") + "\n"
    old, new = (
        r.trajectory(),
        json.loads((tmp_path / "again" / "trajectories" / "gemm-n128-k2048-h100-t1.json").read_text()),
    )
    assert new["info"]["ptxbench"]["replay_of"] == {
        "run": str(r.run.resolve()),
        "trajectory": str(r.run.resolve() / "trajectories" / "gemm-n128-k2048-h100-t1.json"),
    }
    for before, after in zip(old["turns"], new["turns"], strict=True):
        assert [(v["stage"], v["status"], v["message"]) for v in before["verdicts"]] == [
            (v["stage"], v["status"], v["message"]) for v in after["verdicts"]
        ]
        assert after["replayed"] and after["feedback"] == before["feedback"]
    assert new["info"]["model_stats"] == {"instance_cost": 0, "api_calls": 0}
    assert len(r.server.requests) == 3  # no model call


def test_replay_needs_a_run_directory(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"has no trajectories/ folder \(not a model agent's run\)"):
        ReplayAgent.open(f"replay:{tmp_path}", tmp_path / "new")
    (tmp_path / "trajectories").mkdir()
    with pytest.raises(ValueError, match="must be recorded in another run directory"):
        ReplayAgent.open(f"replay:{tmp_path}", tmp_path)


def test_trajectories_are_independent(rig: Callable[..., Rig]) -> None:
    r = rig([Step("no code")], turns=2)
    r.kernel(trajectory=1)
    r.kernel(trajectory=2)
    first, second = r.trajectory(1), r.trajectory(2)
    assert len(first["turns"]) == len(second["turns"]) == 2
    assert second["info"]["ptxbench"]["trajectory"] == 2
    assert len(list(conversation(r.server.requests[1]))) == 4  # system, card, reply, feedback
    assert len(list(conversation(r.server.requests[2]))) == 2  # trajectory 2 starts from system and card alone


class _RecordedGpuStages:
    """Stands in for the GPU stages (this machine has none): replies with the given verdicts, counts calls."""

    def __init__(self, replies: list[list[Verdict]]) -> None:
        self.replies, self.calls = replies, 0

    def evaluate(self, *args: Any, **kwargs: Any) -> list[Verdict]:
        self.calls += 1
        return [Verdict(v.stage, v.status, v.message) for v in self.replies[min(self.calls, len(self.replies)) - 1]]

    def close(self) -> None:
        pass


def _passed(*stages: str) -> list[Verdict]:
    return [Verdict(stage, Status.PASSED, "ok") for stage in stages]


@pytest.mark.parametrize(
    ("first", "calls"),
    [
        (_passed("check", "profile", "sanitize", "time"), 1),  # judged once, then reused
        # profile's unavailable tool is GpuStages' own to keep: no retry can change it
        ([*_passed("check"), Verdict("profile", Status.TOOL_UNAVAILABLE, "no ncu"), *_passed("sanitize", "time")], 1),
        # the trusted child's failure may pass the next time: judged again
        ([Verdict("check", Status.TOOL_UNAVAILABLE, "no reference: the trusted child died")], 2),
        (
            [*_passed("check", "profile", "sanitize"), Verdict("time", Status.TOOL_UNAVAILABLE, "the baseline failed")],
            2,
        ),
    ],
)
def test_a_judged_shape_is_reused_unless_the_trusted_side_failed(
    toolchain: None, gemm: Family, tmp_path: Path, first: list[Verdict], calls: int
) -> None:
    devices = parse_devices((DATA / "nvidia-smi-query.csv").read_text())  # the H200, as recorded
    pipeline = Pipeline(RunDirectory(tmp_path / "run"), lambda: devices, model_settings(model="tests"))
    stages = _RecordedGpuStages([first, _passed("check", "profile", "sanitize", "time")])
    pipeline._gpu = stages  # type: ignore[assignment]
    candidate = Candidate("gemm-n128-k2048", "h100", REFERENCE_GEMM, "reference")
    task = next(t for t in gemm.tasks if t.name == "gemm-n128-k2048")
    shapes = gemm.shapes("visible")[:1]
    verdicts = [pipeline.evaluate(candidate, gemm, task, H100, shapes) for _ in range(2)]
    assert stages.calls == calls
    assert [v.status for v in verdicts[0][2:]] == [v.status for v in first]
    assert verdicts[1][:2] == verdicts[0][:2]  # build and inspect, once


def _realistic_verdicts(build_and_inspect: BuildAndInspect, run: Path, scratch: Path) -> list[list[Verdict]]:
    """Verdicts of every stage, passed and failed, as the stages make them: real builds and inspections, a
    real child's death, a real loader error, the sandbox's own description, recorded ncu output."""
    built, inspected = build_and_inspect(TASKS / "reference" / "h100" / "gemm.cu")
    broken, _ = build_and_inspect(KERNELS / "syntax_error.cu")
    assert inspected is not None
    static = [built, inspected]
    child = Child("trusted", scratch / "trusted", child_environment(scratch / "trusted"))
    try:
        assert child.process.stdin is not None
        child.process.stdin.write("not a request\n")  # the child dies with a Python traceback in its log
        child.process.stdin.flush()
        with pytest.raises(ChildFailed) as died:
            child.request({"op": "prepare"}, 120)
    finally:
        child.close()
    with pytest.raises(OSError) as unloadable:  # what loading the candidate's runtime says when it is missing
        ctypes.CDLL(str(scratch / "libcudart.so.13"))
    references = scratch / "private" / "references"
    references.mkdir(parents=True)
    sandbox = make_sandbox([ROOT, Path.cwd()], [run, scratch], hidden=[scratch / "private"]).description
    correct = check.Comparison("C", "set 0, poison 0xFF", 1 << 20, 0, 0, False, 0.0)
    wrong = check.Comparison("C", "set 1, poison 0xFF", 1 << 20, 3, 0, False, 2.5, ["C[0, 7] = 3.5, expected 1"])
    checked = check.verdict([correct], 0.99999, [], [], 1.0)
    failed_check = check.verdict([correct, wrong], 0.99999, ["A"], [], 1.0)
    for verdict in (checked, failed_check):
        verdict.data.update(sandbox=sandbox, shape="m8192")
    launches = ncu.parse_raw_csv((DATA / "reference_gemm_core.ncu.csv").read_text())
    work = profile.Work(2 * 8192 * 7168 * 5120, 0.5)
    profiled = profile._judge(launches, {launches[0].kernel: "gemm"}, ("HGMMA.*.F32.BF16",), work, "2025.3.1", 1.0)
    library = built.data["host"]
    findings = {  # compute-sanitizer's lines as sanitize keeps them
        "memcheck": [
            "Invalid __global__ write of size 4 bytes",
            f"at gemm_bf16_tn_kernel+0x1b0 in {Path(library).with_name('candidate.cu')}:212",
            f"Host Frame: [0x2f1b3e] in {Path.home() / '.local' / 'lib' / 'libcuda.so.1'}",
            f"Host Frame: ptxbench_gemm [0x1f20] in {library}",
        ]
    }
    sanitized = Verdict(
        "sanitize",
        Status.FAILED,
        "memcheck: " + " | ".join(findings["memcheck"]),
        {"findings": findings, "unavailable": {}, "compute_sanitizer": "2025.3.1", "shape": {"M": 256}},
    )
    series = timing.Series([0.82] * 10, [0.9] * 10, [0.0] * 10)
    timed = timing.verdict(
        series,
        timing.Series([0.75] * 10, [0.8] * 10, [0.0] * 10),
        "cuBLAS",
        "h100",
        work.flops,
        2 * (8192 * 5120 + 7168 * 5120 + 8192 * 7168),
        [],
        {"libraries": {"torch": "2.9.0", "cudart": str(scratch / "libcudart.so.13")}, "kernels": ["gemm"]},
        1.0,
    )
    timed.data.update(rechecked=[13, 41], shape="m8192")
    gpu_stages = [checked, profiled, sanitized, timed]
    return [
        [broken],
        [built, Verdict("inspect", Status.FAILED, f"cannot disassemble {library}", {"found": {}})],
        static + [Verdict(s, Status.SKIPPED, missing_device(H100, [])) for s in STAGES[2:]],
        [
            *static,
            Verdict("check", Status.FAILED, f"load: OSError: {unloadable.value}", {"sandbox": sandbox}),
            failed_check,
        ],
        [*static, checked, Verdict("profile", Status.FAILED, f"the candidate failed under ncu: {died.value}")],
        [*static, checked, profile._empty((DATA / "ncu-exits-3.log").read_text(), 3, "2025.3.1", 1.0)],
        [*static, *gpu_stages],
        [*static, *gpu_stages[:-1], Verdict("time", Status.FAILED, f"the candidate failed while timing: {died.value}")],
    ]


def test_feedback_carries_no_host_path_and_no_sandbox(
    build_and_inspect: BuildAndInspect, gemm: Family, tmp_path: Path
) -> None:
    """Feedback shows the fields each stage allows: the verdicts hold the run directory, the scratch folder in
    /dev/shm, the checkout, HOME and the sandbox's description (with the hidden references folder), the
    model sees none of them."""
    shm = Path("/dev/shm")
    scratch = Path(tempfile.mkdtemp(prefix="ptxbench-", dir=shm if shm.is_dir() else None))
    try:
        cases = _realistic_verdicts(build_and_inspect, tmp_path, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    private = [str(tmp_path), str(scratch), str(ROOT), str(Path.home()), "/dev/shm", "sandbox", "namespaces"]
    recorded = json.dumps([[v.to_json() for v in verdicts] for verdicts in cases])
    assert all(text in recorded for text in private)  # the verdicts do hold them (the test can fail)
    for verdicts in cases:
        text = feedback.render(verdicts, CUDA, gemm)
        leaked = [p for p in private if p in text]
        assert not leaked, f"{leaked} in feedback on {[(v.stage, v.status.value) for v in verdicts]}:\n{text}"
        assert "rechecked" not in text and "hidden" not in text
    shown = feedback.render(cases[6], CUDA, gemm)
    assert "  comparisons: [{output: C, label: set 0, poison 0xFF," in shown  # what the model needs stays
    assert "  executed: {HGMMA.*.F32.BF16: 4587520}" in shown and "  speedup: 0.9146" in shown
    assert "Host Frame: [0x2f1b3e] in libcuda.so.1" in feedback.render(cases[6], CUDA, gemm)
    assert 'File "trusted.py", line' in feedback.render(cases[4], CUDA, gemm)
