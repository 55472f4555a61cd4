"""FlashInfer-Trace: reading a tree (`task/flashinfer_trace.py`) and exporting a run (`ptxbench export`).

Trees are built here by hand (no download); runs are the synthetic ones of `synthetic_runs.py`. Where
flashinfer-bench 0.1.2 is installed (`pip install --no-deps flashinfer-bench==0.1.2`), its own pydantic
models and `TraceSet.from_path` check what is written and the hand-built tree."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_ptxbench.candidate import digest
from pytest_ptxbench.report.cli import main
from pytest_ptxbench.report.flashinfer_definition import Inexpressible, task_definition
from pytest_ptxbench.report.flashinfer_trace import NOT_RUN, collect, export_run
from pytest_ptxbench.report.runs import RunError, load_run
from pytest_ptxbench.rundir import task_set_hash
from pytest_ptxbench.task.catalogue import Family, TaskFileError, load_catalogue, resolved_params, shape_id
from pytest_ptxbench.task.flashinfer_trace import (
    RandomInput,
    SafetensorsInput,
    ScalarInput,
    TraceFileError,
    family_for,
    int_tensor,
    load_tree,
    safetensors_int32,
)
from pytest_ptxbench.task.formula import Formula
from pytest_ptxbench.task.from_trace import not_tasks, tasks_from_tree

from . import flashinfer_bench_data as fib
from .conftest import TASKS
from .synthetic_runs import Turn, kernel, write_run

MODEL = "openai:fake-a"
TASK_SET = task_set_hash(sorted(TASKS.glob("*.yaml")))
needs_fib = pytest.mark.skipif(fib.package_folder() is None, reason=fib.INSTALL)

# Hand-built tree: flashinfer-bench's gemm, paged GQA decode and prefill, and an rmsnorm (no ptxbench family).
BF16 = "bfloat16"


def const(value: int) -> dict[str, Any]:
    return {"type": "const", "value": value}


VAR = {"type": "var"}


def tensor(shape: list[str] | None, dtype: str = BF16) -> dict[str, Any]:
    return {"shape": shape, "dtype": dtype}


def gemm_definition() -> dict[str, Any]:
    return {
        "name": "gemm_n4096_k4096",
        "op_type": "gemm",
        "axes": {"M": VAR, "N": const(4096), "K": const(4096)},
        "inputs": {"A": tensor(["M", "K"]), "B": tensor(["N", "K"])},
        "outputs": {"C": tensor(["M", "N"])},
        "reference": "import torch\n\ndef run(A, B):\n    return torch.matmul(A, B.T)\n",
    }


def gqa_definition(prefill: bool) -> dict[str, Any]:
    rows = "total_q" if prefill else "batch_size"
    axes = {rows: VAR, "num_qo_heads": const(32), "num_kv_heads": const(4), "head_dim": const(128)}
    axes |= {"num_pages": VAR, "page_size": const(1), "len_indptr": VAR, "num_kv_indices": VAR}
    cache = tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"])
    inputs = {"q": tensor([rows, "num_qo_heads", "head_dim"]), "k_cache": cache, "v_cache": cache}
    if prefill:
        inputs["qo_indptr"] = tensor(["len_indptr"], "int32")
    inputs |= {"kv_indptr": tensor(["len_indptr"], "int32"), "kv_indices": tensor(["num_kv_indices"], "int32")}
    inputs["sm_scale"] = tensor(None, "float32")
    return {
        "name": f"gqa_paged_{'prefill_causal' if prefill else 'decode'}_h32_kv4_d128_ps1",
        "op_type": "gqa_paged",
        "axes": axes,
        "inputs": inputs,
        "outputs": {
            "output": tensor([rows, "num_qo_heads", "head_dim"]),
            "lse": tensor([rows, "num_qo_heads"], "float32"),
        },
        "reference": "def run(q, k_cache, v_cache, *rest):\n    raise RuntimeError('not needed here')\n",
        "constraints": ["len_indptr == num_pages + 1"],
    }


def rmsnorm_definition() -> dict[str, Any]:
    return {
        "name": "fused_add_rmsnorm_h4096",
        "op_type": "rmsnorm",
        "axes": {"batch_size": VAR, "hidden_size": const(4096)},
        "inputs": {"x": tensor(["batch_size", "hidden_size"]), "eps": tensor(None, "float32")},
        "outputs": {"y": tensor(["batch_size", "hidden_size"])},
        "reference": "def run(x, eps):\n    return x\n",
        "tags": ["stage:decode"],
    }


def workload_line(definition: str, axes: dict[str, int], inputs: dict[str, Any], uuid: str) -> str:
    return json.dumps({"definition": definition, "workload": {"axes": axes, "inputs": inputs, "uuid": uuid}})


def make_tree(root: Path) -> Path:
    for raw in (gemm_definition(), gqa_definition(False), gqa_definition(True), rmsnorm_definition()):
        path = root / "definitions" / raw["op_type"] / f"{raw['name']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(raw, indent=2))
    (root / "workloads" / "gemm").mkdir(parents=True)
    (root / "workloads" / "gemm" / "gemm_n4096_k4096.jsonl").write_text(
        workload_line("gemm_n4096_k4096", {"M": 8192}, {"A": {"type": "random"}, "B": {"type": "random"}}, "w1")
        + "\n\n"
        + workload_line("gemm_n4096_k4096", {"M": 70}, {}, "w2")
        + "\n"
    )
    (root / "workloads" / "gqa_paged").mkdir(parents=True)
    for name, tables in PAGED_TABLES.items():
        blob = f"blob/workloads/gqa_paged/{name}.safetensors"
        (root / blob).parent.mkdir(parents=True, exist_ok=True)
        (root / blob).write_bytes(safetensors_int32(tables))
        batch = len(tables["kv_indptr"]) - 1
        axes = {"num_pages": 1024, "len_indptr": batch + 1, "num_kv_indices": tables["kv_indptr"][-1]}
        axes |= {"total_q": tables["qo_indptr"][-1]} if "qo_indptr" in tables else {"batch_size": batch}
        inputs: dict[str, Any] = {"q": {"type": "random"}, "sm_scale": {"type": "scalar", "value": 0.088}}
        inputs |= {t: {"type": "safetensors", "path": blob, "tensor_key": t} for t in tables}
        (root / "workloads" / "gqa_paged" / f"{name}.jsonl").write_text(workload_line(name, axes, inputs, name) + "\n")
    return root


# A decode of three sequences (5, 1 and 20 tokens) and a prefill adding 2 and 3 tokens to 4 and 9 held,
# their pages in no order (the import keeps the lengths, and the run draws the pages).
PAGED_TABLES = {
    "gqa_paged_decode_h32_kv4_d128_ps1": {"kv_indptr": [0, 5, 6, 26], "kv_indices": [*range(30, 4, -1)]},
    "gqa_paged_prefill_causal_h32_kv4_d128_ps1": {
        "qo_indptr": [0, 2, 5],
        "kv_indptr": [0, 4, 13],
        "kv_indices": [*range(13)],
    },
}


def test_load_tree_reads_definitions_and_workloads(tmp_path: Path) -> None:
    tree = load_tree(make_tree(tmp_path))
    assert sorted(tree.definitions) == [
        "fused_add_rmsnorm_h4096",
        "gemm_n4096_k4096",
        "gqa_paged_decode_h32_kv4_d128_ps1",
        "gqa_paged_prefill_causal_h32_kv4_d128_ps1",
    ]
    gemm = tree.definitions["gemm_n4096_k4096"]
    assert (gemm.op_type, gemm.const_axes, gemm.var_axes) == ("gemm", {"N": 4096, "K": 4096}, ("M",))
    assert [(t.name, t.shape, t.dtype) for t in gemm.inputs] == [("A", ("M", "K"), BF16), ("B", ("N", "K"), BF16)]
    assert gemm.file == tmp_path / "definitions" / "gemm" / "gemm_n4096_k4096.json"
    decode = tree.definitions["gqa_paged_decode_h32_kv4_d128_ps1"]
    assert decode.tensor("sm_scale") is not None and decode.tensor("sm_scale").shape is None  # type: ignore[union-attr]
    assert tree.definitions["fused_add_rmsnorm_h4096"].tags == ("stage:decode",)
    assert [(w.uuid, dict(w.axes), w.line) for w in tree.workloads_of("gemm_n4096_k4096")] == [
        ("w1", {"M": 8192}, 1),
        ("w2", {"M": 70}, 3),
    ]
    (paged,) = tree.workloads_of("gqa_paged_decode_h32_kv4_d128_ps1")
    blob = "blob/workloads/gqa_paged/gqa_paged_decode_h32_kv4_d128_ps1.safetensors"
    assert paged.inputs == (
        RandomInput("q"),
        ScalarInput("sm_scale", 0.088),
        SafetensorsInput("kv_indptr", blob, "kv_indptr"),
        SafetensorsInput("kv_indices", blob, "kv_indices"),
    )


@needs_fib
def test_the_hand_built_tree_is_one_flashinfer_bench_loads(tmp_path: Path) -> None:
    loaded = fib.trace_set(make_tree(tmp_path))
    assert sorted(loaded["definitions"]) == sorted(load_tree(tmp_path).definitions)
    assert sum(len(w) for w in loaded["workload"].values()) == 4


def test_family_for_known_definitions(tmp_path: Path) -> None:
    tree = load_tree(make_tree(tmp_path))
    mapped = {name: family_for(d) for name, d in tree.definitions.items()}
    gqa = {"H": 32, "KV": 4, "D": 128, "P": 1}
    assert mapped == {
        "gemm_n4096_k4096": ("gemm", {"N": 4096, "K": 4096}),
        "gqa_paged_decode_h32_kv4_d128_ps1": ("gqa_paged_decode", gqa),
        "gqa_paged_prefill_causal_h32_kv4_d128_ps1": ("gqa_paged_prefill", gqa | {"mask": "causal"}),
        "fused_add_rmsnorm_h4096": "op_type 'rmsnorm' has no ptxbench family",
    }


@pytest.mark.parametrize(
    "change, reason",
    [
        (lambda d: d["inputs"]["A"].update(dtype="float8_e4m3fn"), "is not bf16 A[M, K], B[N, K]"),
        (lambda d: d["axes"].update(N=VAR), "needs M var and N, K const"),
        (lambda d: d["outputs"].update(C=tensor(["M", "N"], "float32")), "does not output bf16 C[M, N]"),
    ],
)
def test_family_for_refuses_a_gemm_of_another_kind(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    raw = gemm_definition()
    change(raw)
    (tmp_path / "definitions").mkdir()
    (tmp_path / "definitions" / "g.json").write_text(json.dumps(raw))
    assert reason in str(family_for(load_tree(tmp_path).definitions["gemm_n4096_k4096"]))


def test_family_for_refuses_gqa_outside_ptxbench(tmp_path: Path) -> None:
    fp16 = gqa_definition(False)
    fp16["inputs"]["q"]["dtype"] = "float16"
    uneven = gqa_definition(True) | {"name": "uneven"}
    uneven["axes"]["num_kv_heads"] = const(5)
    no_page = gqa_definition(False) | {"name": "no_page"}
    no_page["axes"]["page_size"] = VAR
    no_fill = gqa_definition(False) | {"name": "no_fill"}  # pages of 64 tokens, and no last page's fill
    no_fill["axes"]["page_size"] = const(64)
    masked = gqa_definition(True) | {"name": "masked", "tags": ["mask:sliding"]}
    (tmp_path / "definitions").mkdir()
    for i, raw in enumerate((fp16, uneven, no_page, no_fill, masked)):
        (tmp_path / "definitions" / f"{i}.json").write_text(json.dumps(raw))
    tree = load_tree(tmp_path)
    assert "take bf16 q, k_cache, v_cache" in str(family_for(tree.definitions[fp16["name"]]))
    assert "num_qo_heads 32 is no multiple of num_kv_heads 5" in str(family_for(tree.definitions["uneven"]))
    assert "lacks const axes page_size" in str(family_for(tree.definitions["no_page"]))
    assert "has no kv_last_page_len input: its sequences' lengths are not given" in str(
        family_for(tree.definitions["no_fill"])
    )
    assert "tag 'mask:sliding' is none of causal, full" in str(family_for(tree.definitions["masked"]))


GEMM_FILE = "definitions/gemm/gemm_n4096_k4096.json"
GEMM_WORKLOADS = "workloads/gemm/gemm_n4096_k4096.jsonl"


def edit_definition(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    raw = json.loads((root / GEMM_FILE).read_text())
    change(raw)
    (root / GEMM_FILE).write_text(json.dumps(raw))


def edit_workload(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Change the second workload line of the gemm (line 3 of its file)."""
    lines = (root / GEMM_WORKLOADS).read_text().splitlines()
    raw = json.loads(lines[2])
    change(raw)
    lines[2] = json.dumps(raw)
    (root / GEMM_WORKLOADS).write_text("\n".join(lines) + "\n")


MALFORMED: list[tuple[Callable[[Path], None], str]] = [
    (lambda r: (r / GEMM_FILE).write_text('{\n  "name": "gemm",\n  "axes": \n'), rf"{GEMM_FILE}:4: not valid JSON"),
    (lambda r: edit_definition(r, lambda d: d.pop("op_type")), rf"{GEMM_FILE}: field 'op_type': missing"),
    (
        lambda r: edit_definition(r, lambda d: d["inputs"]["A"].update(dtype="bf16")),
        rf"{GEMM_FILE}: field 'inputs.A.dtype': \"bf16\" is not one of float32",
    ),
    (
        lambda r: edit_definition(r, lambda d: d["inputs"]["B"].update(shape=["N", "KK"])),
        rf"{GEMM_FILE}: field 'inputs.B.shape': axis 'KK' is not in 'axes'",
    ),
    (
        lambda r: edit_definition(r, lambda d: d["axes"].update(N=const(-1))),
        rf"{GEMM_FILE}: field 'axes.N.value': expected a non-negative integer, got -1",
    ),
    (
        lambda r: edit_definition(r, lambda d: d["axes"].update(N={"type": "fixed"})),
        rf"{GEMM_FILE}: field 'axes.N': expected",
    ),
    (
        lambda r: edit_definition(r, lambda d: d.update(reference="def main():\n    pass\n")),
        rf"{GEMM_FILE}: field 'reference': defines no top-level function 'run'",
    ),
    (
        lambda r: edit_definition(r, lambda d: d["outputs"].update(A=tensor(["M", "N"]))),
        rf"{GEMM_FILE}: field 'outputs': 'A' is also an input",
    ),
    (
        lambda r: edit_definition(r, lambda d: d.update(constraints=["M >"])),
        rf"{GEMM_FILE}: field 'constraints\[0\]': not a Python expression",
    ),
    (
        lambda r: (r / "definitions" / "again.json").write_text(json.dumps(gemm_definition())),
        r"field 'name': definition 'gemm_n4096_k4096' is also defined in",
    ),
    (
        lambda r: edit_workload(r, lambda w: w.update(definition="gemm_n1_k1")),
        rf"{GEMM_WORKLOADS}:3: field 'definition': 'gemm_n1_k1' is not defined",
    ),
    (
        lambda r: edit_workload(r, lambda w: w["workload"]["axes"].update(M="70")),
        rf"{GEMM_WORKLOADS}:3: field 'workload.axes.M': expected a non-negative integer, got \"70\"",
    ),
    (
        lambda r: edit_workload(r, lambda w: w["workload"].update(axes={})),
        rf"{GEMM_WORKLOADS}:3: field 'workload.axes': no value for var axis 'M'",
    ),
    (
        lambda r: edit_workload(r, lambda w: w["workload"]["axes"].update(N=2048)),
        rf"{GEMM_WORKLOADS}:3: field 'workload.axes.N': 2048 differs from the const value 4096",
    ),
    (
        lambda r: edit_workload(r, lambda w: w["workload"].update(inputs={"A": {"type": "zeros"}})),
        rf"{GEMM_WORKLOADS}:3: field 'workload.inputs.A.type': expected 'random', 'scalar' or 'safetensors'",
    ),
    (
        lambda r: edit_workload(r, lambda w: w["workload"].update(inputs={"X": {"type": "random"}})),
        rf"{GEMM_WORKLOADS}:3: field 'workload.inputs.X': not an input",
    ),
    (
        lambda r: edit_workload(
            r, lambda w: w["workload"].update(inputs={"A": {"type": "safetensors", "path": "../a", "tensor_key": "A"}})
        ),
        rf"{GEMM_WORKLOADS}:3: field 'workload.inputs.A.path': '../a' leaves the tree",
    ),
    (
        lambda r: edit_workload(r, lambda w: w["workload"].pop("uuid")),
        rf"{GEMM_WORKLOADS}:3: field 'workload.uuid': missing",
    ),
    (
        lambda r: edit_workload(r, lambda w: w.update(solution="s", evaluation={"status": "PASSED"})),
        rf"{GEMM_WORKLOADS}:3: field 'solution': set: a workload trace has none",
    ),
    (
        lambda r: (r / GEMM_WORKLOADS).write_text('{"definition": \n'),
        rf"{GEMM_WORKLOADS}:1: not valid JSON",
    ),
]


@pytest.mark.parametrize("damage, message", MALFORMED)
def test_malformed_files_are_named_with_line_and_field(
    tmp_path: Path, damage: Callable[[Path], None], message: str
) -> None:
    root = make_tree(tmp_path / "tree")
    damage(root)
    with pytest.raises(TraceFileError, match=message):
        load_tree(root)


def test_a_folder_without_definitions_is_no_tree(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no definitions/ folder: not a FlashInfer-Trace tree"):
        load_tree(tmp_path)


# Export. Seven trajectories of one turn each, evaluated on all 12 gemm shapes (84 rows): a `reference`-like
# run (no trajectory files), so every source comes from builds/.
SCRIPTS = [
    [Turn(1, failing="build")],  # COMPILE_ERROR
    [Turn(2, failing="check")],  # INCORRECT_NUMERICAL (comparisons added below)
    [Turn(3, 1.5)],  # PASSED
    [Turn(4, gpu=False)],  # GPU stages skipped: no trace
    [Turn(5, failing="inspect")],  # COMPILE_ERROR
    [Turn(6, 2.0, failing="profile")],  # RUNTIME_ERROR
    [Turn(None)],  # no kernel
]
H100 = "NVIDIA H100 80GB HBM3"


def write_builds(run: Path, numbers: range, family: str = "gemm") -> None:
    for n in numbers:
        folder = run / "builds" / f"{family}-h100-{digest(kernel(n))}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "candidate.cu").write_text(kernel(n))


def edit_rows(run: Path, change: Callable[[dict[str, Any]], None]) -> None:
    file = run / "results.jsonl"
    rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    for row in rows:
        change(row)
    file.write_text("".join(json.dumps(row) + "\n" for row in rows))


def add_gpu_numbers(row: dict[str, Any]) -> None:
    """Comparisons for the failed check of t2 and the passed one of t3; t3's baseline, libraries and device."""
    comparison = {"output": "C", "label": "normal", "elements": 100, "wrong": 0, "unwritten": 0, "nonfinite": 0}
    for verdict in row["verdicts"]:
        if verdict["stage"] == "check" and row["trajectory"] == 2:
            verdict["data"]["comparisons"] = [comparison | {"wrong": 7, "max_abs_error": 3.5}]
        if verdict["stage"] == "check" and row["trajectory"] == 3:
            errors = (0.01, 0.03)
            verdict["data"]["comparisons"] = [comparison | {"label": str(e), "max_abs_error": e} for e in errors]
        if verdict["stage"] == "time" and row["trajectory"] == 3:
            verdict["data"] |= {"baseline_median_ms": 1.0, "libraries": {"torch": "2.9.0", "cudnn": 91000}}
    if row["trajectory"] == 3:
        row["device"] = H100


@pytest.fixture
def run(tmp_path: Path, gemm: Family) -> Path:
    path = write_run(tmp_path / "run", gemm, MODEL, SCRIPTS, turns=0, task_set=TASK_SET)
    write_builds(path, range(1, 7))
    edit_rows(path, add_gpu_numbers)
    return path


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for file in sorted(path.rglob("*.jsonl")) for line in file.read_text().splitlines()]


def test_export_maps_each_outcome_to_a_status(run: Path, tmp_path: Path) -> None:
    session = load_run(run).results[0]["session"]
    started = "2026-08-01T12:00:00+00:00"
    record = {"id": session, "started": started, "collected": [], "finished": started, "exit_status": 0}
    (run / "sessions.json").write_text(json.dumps([record]))
    out = tmp_path / "tree"
    export = export_run(run, TASKS, out)
    traces = lines(out / "traces")
    assert Counter(t["evaluation"]["status"] for t in traces) == {
        "COMPILE_ERROR": 24,
        "INCORRECT_NUMERICAL": 12,
        "PASSED": 12,
        "RUNTIME_ERROR": 12,
    }
    assert export.not_traced == {NOT_RUN: 12, "no kernel was evaluated": 12}
    assert [p.relative_to(out).as_posix() for p in sorted(out.rglob("*.json*")) if "solutions" not in p.parts] == [
        "definitions/gemm/gemm_n128_k2048.json",
        "traces/gemm/gemm_n128_k2048.jsonl",
        "workloads/gemm/gemm_n128_k2048.jsonl",
    ]
    assert len(lines(out / "workloads")) == 12
    by = {(t["solution"][-16:], t["workload"]["axes"]["M"]): t["evaluation"] for t in traces}
    passed = by[digest(kernel(3)), 8192]
    assert passed["performance"] == {"latency_ms": 1 / 1.5, "reference_latency_ms": 1.0, "speedup_factor": 1.5}
    assert passed["correctness"]["max_absolute_error"] == 0.03
    assert passed["correctness"]["max_relative_error"] == "NaN"  # ptxbench records none
    assert passed["correctness"]["extra"]["ptxbench"]["elements"] == 200
    assert passed["environment"] == {
        "hardware": H100,
        "libs": {"ptxbench": "0.1.0", "torch": "2.9.0", "cudnn": "91000"},
    }
    assert passed["timestamp"] == started  # the session's start; without sessions.json, the run's
    wrong = by[digest(kernel(2)), 70]
    assert wrong["correctness"]["max_absolute_error"] == 3.5 and "performance" not in wrong
    assert "check failed" in wrong["log"]
    failed_build = by[digest(kernel(1)), 70]
    assert failed_build["log"].startswith("build failed: candidate.cu(3)")
    assert failed_build["environment"]["hardware"] == "no GPU (H100-class target)"
    assert "correctness" not in failed_build and "performance" not in failed_build
    assert by[digest(kernel(6)), 70]["status"] == "RUNTIME_ERROR"
    assert "profile failed" in by[digest(kernel(6)), 70]["log"]


def test_export_writes_each_kernel_as_a_solution(run: Path, tmp_path: Path) -> None:
    export_run(run, TASKS, tmp_path / "tree")
    solutions = [json.loads(p.read_text()) for p in sorted((tmp_path / "tree" / "solutions").rglob("*.json"))]
    assert sorted(s["sources"][0]["content"] for s in solutions) == sorted(kernel(n) for n in range(1, 7))
    first = next(s for s in solutions if s["sources"][0]["content"] == kernel(1))
    assert first["name"] == f"openai_fake-a_gemm_n128_k2048_h100_cuda_{digest(kernel(1))}"
    assert (first["definition"], first["author"]) == ("gemm_n128_k2048", MODEL)
    trace = json.loads((tmp_path / "tree" / "traces" / "gemm" / "gemm_n128_k2048.jsonl").read_text().splitlines()[0])
    assert trace["evaluation"]["timestamp"] == json.loads((run / "environment.json").read_text())["started"]
    assert first["spec"] == {
        "language": "cuda",
        "target_hardware": ["sm_90a"],
        "entry_point": "candidate.cu::ptxbench_gemm",
        "dependencies": [],
        "destination_passing_style": True,
    }
    assert 'extern "C" cudaError_t ptxbench_gemm(' in first["description"]


def test_a_model_run_takes_its_sources_from_kernels(tmp_path: Path, gemm: Family) -> None:
    path = write_run(tmp_path / "run", gemm, MODEL, [[Turn(1, failing="build"), Turn(2, 1.2)]], task_set=TASK_SET)
    export = export_run(path, TASKS, tmp_path / "tree")
    assert [s["sources"][0]["content"] for s in export.solutions.values()] == [kernel(2)]


@needs_fib
def test_flashinfer_bench_validates_and_loads_the_export(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "tree"
    export_run(run, TASKS, out)
    models = fib.models()
    for file in sorted((out / "definitions").rglob("*.json")):
        assert models.Definition.model_validate_json(file.read_text()).name == "gemm_n128_k2048"
    for file in sorted((out / "solutions").rglob("*.json")):
        models.Solution.model_validate_json(file.read_text())
    for line in (out / "workloads" / "gemm" / "gemm_n128_k2048.jsonl").read_text().splitlines():
        assert models.Trace.model_validate_json(line).is_workload_trace()
    statuses = Counter()
    for line in (out / "traces" / "gemm" / "gemm_n128_k2048.jsonl").read_text().splitlines():
        trace = models.Trace.model_validate_json(line)
        statuses[trace.evaluation.status.value] += 1
        if trace.evaluation.correctness is not None:
            assert math.isnan(trace.evaluation.correctness.max_relative_error)
    assert statuses == {"COMPILE_ERROR": 24, "INCORRECT_NUMERICAL": 12, "PASSED": 12, "RUNTIME_ERROR": 12}
    loaded = fib.trace_set(out)
    assert list(loaded["definitions"]) == ["gemm_n128_k2048"]
    assert len(loaded["solutions"]["gemm_n128_k2048"]) == 6
    assert len(loaded["workload"]["gemm_n128_k2048"]) == 12
    assert len(loaded["traces"]["gemm_n128_k2048"]) == 60


def test_export_then_load_tree_gives_back_what_was_exported(run: Path, tmp_path: Path) -> None:
    export = export_run(run, TASKS, tmp_path / "tree")
    tree = load_tree(tmp_path / "tree")
    assert dict(tree.definitions) == export.definitions
    assert sorted(tree.workloads, key=lambda w: w.uuid) == sorted(export.workloads.values(), key=lambda w: w.uuid)
    assert family_for(tree.definitions["gemm_n128_k2048"]) == ("gemm", {"N": 128, "K": 2048})


def test_the_cli_exports_and_names_what_is_wrong(run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "tree"
    assert main(["export", str(run), "--format", "flashinfer-trace", "--out", str(out), "--tasks", str(TASKS)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 1 definition(s), 12 workload(s), 6 solution(s), 60 trace(s)" in printed
    assert f"not traced: 12 row(s): {NOT_RUN}" in printed
    assert main(["export", str(run), "--format", "flashinfer-trace", "--out", str(out), "--tasks", str(TASKS)]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert main(["export", str(run), "--format", "flashinfer-trace", "--out", str(run / "x")]) == 2
    assert "inside the run directory" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["export", str(run), "--format", "parquet", "--out", str(tmp_path / "other")])


def export_error(run: Path, tmp_path: Path) -> str:
    out = tmp_path / "failed"
    with pytest.raises(RunError) as caught:
        export_run(run, TASKS, out)
    assert not out.exists() and not list(tmp_path.glob(".failed-*"))  # nothing half-written
    return str(caught.value)


def test_a_run_without_its_sources_is_refused(run: Path, tmp_path: Path) -> None:
    sha = digest(kernel(3))
    (run / "builds" / f"gemm-h100-{sha}" / "candidate.cu").unlink()
    message = export_error(run, tmp_path)
    assert f"results.jsonl: row 'gemm-n128-k2048-h100-m8192-t3': field 'candidate.sha256' {sha}" in message
    assert f"no source at {run}/builds/gemm-h100-{sha}/candidate.cu" in message


def test_a_source_that_is_not_the_rows_kernel_is_refused(run: Path, tmp_path: Path) -> None:
    sha = digest(kernel(3))
    (run / "builds" / f"gemm-h100-{sha}" / "candidate.cu").write_text(kernel(99))
    assert f"its sha256 is {digest(kernel(99))}, not the field 'candidate.sha256' {sha}" in export_error(run, tmp_path)


def test_a_passed_row_without_a_time_median_is_refused(run: Path, tmp_path: Path) -> None:
    def drop_median(row: dict[str, Any]) -> None:
        for verdict in row["verdicts"]:
            if verdict["stage"] == "time" and row["trajectory"] == 3:
                del verdict["data"]["median_ms"]

    edit_rows(run, drop_median)
    message = export_error(run, tmp_path)
    assert "row 'gemm-n128-k2048-h100-m8192-t3': field 'verdicts[time].data.median_ms' is None" in message


def test_a_run_of_another_catalogue_is_refused(tmp_path: Path, gemm: Family) -> None:
    path = write_run(tmp_path / "run", gemm, MODEL, [[Turn(1)]], turns=0)
    assert "field 'task_set' is 0123456789abcdef, but" in export_error(path, tmp_path)
    (path / "environment.json").unlink()
    assert "environment.json: missing" in export_error(path, tmp_path)


def test_a_row_of_a_task_the_catalogue_lacks_is_refused(run: Path, tmp_path: Path) -> None:
    edit_rows(run, lambda row: row.update(task="gemm-n1-k1"))
    assert "field 'task' is 'gemm-n1-k1', a task the catalogue does not have" in export_error(run, tmp_path)


# Definitions of the other families, straight from the catalogue.


def families() -> dict[str, Family]:
    return {f.name: f for f in load_catalogue(TASKS)}


def test_attention_tasks_become_definitions_with_scalars_and_a_fixed_mask() -> None:
    family = families()["attention_fwd"]
    task = next(t for t in family.tasks if t.axes == {"D": 128, "mask": "causal"})
    made = task_definition(family, task)
    definition = made.definition
    assert (definition.name, definition.op_type) == ("attention_fwd_d128_causal", "attention_fwd")
    assert (definition.const_axes, definition.var_axes) == ({"D": 128}, ("B", "H", "S"))
    assert [(t.name, t.shape, t.dtype) for t in definition.inputs] == [
        ("Q", ("B", "H", "S", "D"), BF16),
        ("K", ("B", "H", "S", "D"), BF16),
        ("V", ("B", "H", "S", "D"), BF16),
        ("causal", None, "int32"),
        ("scale", None, "float32"),
    ]
    assert [(t.name, t.dtype) for t in definition.outputs] == [("O", BF16), ("LSE", "float32")]
    assert "mask:causal" in definition.tags and "mask = causal" in (definition.description or "")
    workload = made.workload({"B": 2, "H": 16, "S": 1024}, 0)
    assert dict(workload.axes) == {"B": 2, "H": 16, "S": 1024}
    assert workload.inputs[3:] == (ScalarInput("causal", 1), ScalarInput("scale", 128**-0.5))
    compile(definition.reference, "reference", "exec")
    assert "def run(Q, K, V, causal, scale):" in definition.reference
    assert "'mask': 'causal'" in definition.reference and "'S': Q.shape[2]" in definition.reference


def test_derived_inputs_are_said_to_be_drawn_at_random() -> None:
    family = families()["attention_bwd"]
    definition = task_definition(family, family.tasks[0]).definition
    assert "In ptxbench O, LSE are computed from the other inputs" in (definition.description or "")


@needs_fib
def test_every_catalogue_task_is_a_definition_flashinfer_bench_accepts() -> None:
    models = fib.models()
    for family in families().values():
        for task in family.tasks:
            try:
                definition = task_definition(family, task).definition
            except Inexpressible:
                continue
            models.Definition.model_validate(definition.to_json())


def test_expressions_become_axes_of_their_own(gemm: Family) -> None:
    names = {"M", "N", "K"}
    shapes = {"B": (Formula("N", names), Formula("K // 2", names)), "C": (Formula("2 * M", names),)}
    params = tuple(replace(p, shape=shapes[p.name]) if p.name in shapes else p for p in gemm.launcher.params)
    family = replace(gemm, launcher=replace(gemm.launcher, params=params))
    made = task_definition(family, gemm.tasks[0])
    axes = {a.name: (a.value, a.description) for a in made.definition.axes}
    assert axes["2*M"] == (None, "= 2 * M") and axes["K//2"] == (1024, "= K // 2")
    assert dict(made.workload({"M": 70}, 0).axes) == {"M": 70, "2*M": 140}


def test_a_dtype_flashinfer_trace_cannot_name_is_inexpressible(gemm: Family, run: Path) -> None:
    params = tuple(replace(p, dtype="u8") if p.name == "C" else p for p in gemm.launcher.params)
    family = replace(gemm, launcher=replace(gemm.launcher, params=params))
    with pytest.raises(Inexpressible, match="output 'C' is u8, which FlashInfer-Trace has no name for"):
        task_definition(family, gemm.tasks[0])
    export = collect(load_run(run), [family])
    assert export.traces == [] and "u8" in export.not_exported["gemm"]
    assert export.not_traced["family gemm has no definition"] == 72


def _safetensors(path: Path) -> dict[str, list[int]]:
    """The int32 tensors of a safetensors file, read by its layout (8-byte header length, JSON, data)."""
    data = path.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    body = data[8 + size :]
    out = {}
    for name, entry in header.items():
        assert entry["dtype"] == "I32", entry
        first, last = entry["data_offsets"]
        out[name] = [int.from_bytes(body[i : i + 4], "little", signed=True) for i in range(first, last, 4)]
        assert len(out[name]) == entry["shape"][0]
    return out


@pytest.mark.parametrize("name", ["gqa_paged_decode", "gqa_paged_prefill"])
def test_a_paged_run_exports_the_page_tables_it_used(tmp_path: Path, name: str) -> None:
    """Each workload of a paged task names the run's own page tables (its seed), in a safetensors blob beside
    it; the definitions leave out the shape axes no tensor is sized by (a mean length, a pattern)."""
    family = families()[name]
    path = write_run(tmp_path / "run", family, MODEL, [[Turn(3, 1.5)]], turns=0, task_set=TASK_SET)
    write_builds(path, range(3, 4), name)
    environment = json.loads((path / "environment.json").read_text())
    environment["settings"]["seed"] = 11
    (path / "environment.json").write_text(json.dumps(environment))
    export = export_run(path, TASKS, tmp_path / "tree")
    assert not export.not_exported and len(export.workloads) == len(family.shapes("all"))
    (definition,) = export.definitions.values()
    assert {"L", "lens"}.isdisjoint(a.name for a in definition.axes)
    task = family.tasks[0]
    for workload in export.workloads.values():
        shape = next(s for s in family.shapes("all") if family.values(task, s.values)["B"] == workload.axes["B"])
        blobs = {i.path for i in workload.inputs if isinstance(i, SafetensorsInput)}
        assert len(blobs) == 1 and family.host_inputs is not None
        tables = _safetensors(tmp_path / "tree" / blobs.pop())
        assert tables == family.host_inputs.tables(family.values(task, shape.values), 11)
    if fib.package_folder() is not None:
        models = fib.models()
        models.Definition.model_validate(definition.to_json())
        loaded = fib.trace_set(tmp_path / "tree")
        assert len(loaded["workload"][definition.name]) == len(family.shapes("all"))


def test_the_reference_computes_the_family_reference_where_torch_is() -> None:
    torch = pytest.importorskip("torch")
    family = families()["gemm"]
    definition = task_definition(family, family.tasks[0]).definition
    namespace: dict[str, Any] = {}
    exec(compile(definition.reference, "reference", "exec"), namespace)
    a, b = torch.randn(5, 2048).bfloat16(), torch.randn(128, 2048).bfloat16()
    got = namespace["run"](a, b)
    assert got["C"].dtype == torch.bfloat16
    assert torch.equal(got["C"], (a.float() @ b.float().T).bfloat16())


# A tree's definitions as the tasks (`--ptx-tasks`)


def test_a_trees_definitions_become_the_tasks_and_its_workloads_the_shapes(tmp_path: Path) -> None:
    tree = load_tree(make_tree(tmp_path / "tree"))
    gemm, decode, prefill = tasks_from_tree(load_catalogue(TASKS), tree)
    assert [t.name for t in gemm.tasks] == ["gemm-n4096-k4096"]
    assert [s.id for s in gemm.shapes("visible")] == ["m8192", "m70"]
    assert "m70" not in [s.id for s in gemm.shapes("hidden")] and gemm.hidden  # visible now, the rest kept
    assert not_tasks(tree) == {"fused_add_rmsnorm_h4096": "op_type 'rmsnorm' has no ptxbench family"}
    # a paged workload's lengths (from its page tables) are the shape; the pages they occupy are the run's
    assert [t.name for t in decode.tasks] == ["gqa_paged_decode-h32-kv4-d128-ps1"]
    (shape,) = decode.shapes("visible")
    assert shape.values == {"B": 3, "L": 9, "lens": "given:5,1,20"} and shape.id.startswith("b3-l9-given")
    values = decode.values(decode.tasks[0], shape.values)
    assert values["TOKENS"] == 26 and decode.flops(values) == 4 * 26 * 32 * 128
    assert decode.host_inputs is not None
    tables = decode.host_inputs.tables(values, 5)
    assert tables["kv_indptr"] == [0, 5, 6, 26] and tables["kv_last_page_len"] == [1, 1, 1]
    assert tables["kv_indices"][:26] != PAGED_TABLES["gqa_paged_decode_h32_kv4_d128_ps1"]["kv_indices"]
    assert [t.name for t in prefill.tasks] == ["gqa_paged_prefill-h32-kv4-d128-ps1-causal"]
    (shape,) = prefill.shapes("visible")
    assert shape.values == {"B": 2, "Q": 3, "L": 7, "lens": "given:2/4,3/9"}
    values = prefill.values(prefill.tasks[0], shape.values)
    assert (values["ROWS"], values["TOKENS"], values["PAIRS"]) == (5, 13, (2 * 4 - 1) + (3 * 9 - 3))
    params = {p["name"]: p for p in resolved_params(prefill, values)}
    assert params["q"]["shape"] == [5, 32, 128] and params["lse"]["shape"] == [5, 32]
    assert prefill.host_inputs is not None
    made = prefill.host_inputs.tables(values, 5)
    assert made["qo_indptr"] == [0, 2, 5] and made["kv_indptr"] == [0, 4, 13]


@pytest.mark.parametrize("name", ["gqa_paged_decode", "gqa_paged_prefill"])
def test_a_paged_export_loads_back_as_the_same_lengths(tmp_path: Path, name: str) -> None:
    """Round trip: the tree a paged run exports is loaded by `--ptx-tasks` as the shapes of the same sequences."""
    family = families()[name]
    path = write_run(tmp_path / "run", family, MODEL, [[Turn(3, 1.5)]], turns=0, task_set=TASK_SET)
    write_builds(path, range(3, 4), name)
    environment = json.loads((path / "environment.json").read_text())
    seed = environment["settings"]["seed"] = 11
    (path / "environment.json").write_text(json.dumps(environment))
    export_run(path, TASKS, tmp_path / "tree")
    (loaded,) = tasks_from_tree(load_catalogue(TASKS), load_tree(tmp_path / "tree"))
    task = family.tasks[0]
    assert loaded.tasks == (task,)
    assert family.host_inputs is not None and loaded.host_inputs is not None

    def sequences(f: Family, shape: dict[str, Any], seed: int) -> list[list[int]]:
        tables = f.host_inputs.tables(f.values(task, shape), seed) if f.host_inputs else {}
        return [
            tables[n][: len(tables["kv_indptr"])] for n in ("kv_indptr", "kv_last_page_len", "qo_indptr") if n in tables
        ]

    before = sorted(sequences(family, dict(s.values), seed) for s in family.shapes("all"))
    after = sorted(sequences(loaded, dict(s.values), seed + 1) for s in loaded.shapes("visible"))
    assert after == before and all(str(s.values["lens"]).startswith("given:") for s in loaded.shapes("visible"))
    for s in loaded.shapes("visible"):  # the formulas see the same token counts
        original = next(
            o
            for o in family.shapes("all")
            if sequences(family, dict(o.values), 1) == sequences(loaded, dict(s.values), 1)
        )
        assert loaded.flops(loaded.values(task, s.values)) == family.flops(family.values(task, original.values))


def _paged_tree(tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    root = make_tree(tmp_path / "tree")
    file = root / "workloads" / "gqa_paged" / "gqa_paged_decode_h32_kv4_d128_ps1.jsonl"
    raw = json.loads(file.read_text())
    change(raw["workload"])
    file.write_text(json.dumps(raw) + "\n")
    return root


@pytest.mark.parametrize(
    "change, why",
    [
        (
            lambda w: w["inputs"].update(kv_indptr={"type": "random"}),
            "field 'workload.inputs.kv_indptr': the page tables must come from a blob",
        ),
        (
            lambda w: w["inputs"]["kv_indptr"].update(path="blob/none.safetensors"),
            "blob/none.safetensors: cannot read kv_indptr's safetensors file: No such file or directory",
        ),
        (
            lambda w: w["inputs"]["kv_indptr"].update(tensor_key="indptr"),
            "decode.safetensors... no tensor 'indptr' (has ['kv_indices', 'kv_indptr'])",
        ),
        (
            lambda w: w["inputs"]["kv_indptr"].update(tensor_key="kv_indices"),
            "kv_indptr [30, 29, 28, 27, 26, ... (26)] and kv_last_page_len",
        ),
    ],
)
def test_a_paged_workload_without_valid_page_tables_is_named(
    tmp_path: Path, change: Callable[[dict[str, Any]], None], why: str
) -> None:
    root = _paged_tree(tmp_path, change)
    with pytest.raises(TraceFileError) as refused:
        tasks_from_tree(load_catalogue(TASKS), load_tree(root))
    message = str(refused.value).replace("gqa_paged_decode_h32_kv4_d128_ps1.safetensors:", "decode.safetensors...")
    assert why in message
    if "workload." in why or "kv_last" in why:
        assert message.startswith(f"{root}/workloads/gqa_paged/gqa_paged_decode_h32_kv4_d128_ps1.jsonl:1: workload")


def test_safetensors_blobs_are_read_as_written_and_malformed_ones_named(tmp_path: Path) -> None:
    blob = tmp_path / "t.safetensors"
    blob.write_bytes(safetensors_int32({"a": [0, -1, 2**31 - 1], "b": []}))
    assert int_tensor(tmp_path, SafetensorsInput("x", "t.safetensors", "a")) == [0, -1, 2**31 - 1]
    assert int_tensor(tmp_path, SafetensorsInput("x", "t.safetensors", "b")) == []
    assert _safetensors(blob) == {"a": [0, -1, 2**31 - 1], "b": []}  # the layout, read independently
    header = json.dumps({"w": {"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}}).encode()
    blob.write_bytes(
        len(header).to_bytes(8, "little") + header + (5).to_bytes(8, "little") + (-3).to_bytes(8, "little", signed=True)
    )
    assert int_tensor(tmp_path, SafetensorsInput("x", "t.safetensors", "w")) == [5, -3]
    for body, why in [
        (b"\xff" * 12, "not a safetensors file"),
        (
            _header({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}) + b"\0" * 4,
            "is F32, expected I32 or I64",
        ),
        (
            _header({"w": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}) + b"\0" * 4,
            "data_offsets [0, 8] outside",
        ),
    ]:
        blob.write_bytes(body)
        with pytest.raises(TraceFileError, match=why.replace("[", r"\[").replace("]", r"\]")):
            int_tensor(tmp_path, SafetensorsInput("x", "t.safetensors", "w"))


def _header(entries: dict[str, Any]) -> bytes:
    text = json.dumps(entries).encode()
    return len(text).to_bytes(8, "little") + text


def test_a_workload_that_is_no_shape_of_the_family_is_named_with_its_line(tmp_path: Path) -> None:
    root = make_tree(tmp_path / "tree")
    (root / "workloads" / "gemm" / "gemm_n4096_k4096.jsonl").write_text(
        workload_line("gemm_n4096_k4096", {"M": 8192}, {}, "w1")
        + "\n"
        + workload_line("gemm_n4096_k4096", {"M": 0}, {}, "w2")
    )
    with pytest.raises(TaskFileError) as refused:
        tasks_from_tree(load_catalogue(TASKS), load_tree(root))
    assert (
        str(refused.value)
        == f"{root}/workloads/gemm/gemm_n4096_k4096.jsonl: line 2: workload w2.M: must be positive, got 0"
    )


def test_ptx_tasks_collects_the_trees_tasks_and_says_what_it_cannot_load(project: pytest.Pytester) -> None:
    tree = make_tree(project.path / "tree")
    result = project.runpytest_subprocess(
        "tasks", f"--ptx-tasks={tree}", "--ptx-shapes=visible", "--collect-only", "-q"
    )
    ids = sorted(line.split("[")[-1].rstrip("]") for line in result.outlines if "::" in line)
    assert ids[:2] == ["gemm-n4096-k4096-h100-m70", "gemm-n4096-k4096-h100-m8192"]
    decode = shape_id("b{B}-l{L}-{lens}", {"B": 3, "L": 9, "lens": "given:5,1,20"})
    assert f"gqa_paged_decode-h32-kv4-d128-ps1-h100-{decode}" in ids
    assert sum("gqa_paged_prefill-h32-kv4-d128-ps1-causal-h100-b2-q3-l7-given" in i for i in ids) == 1
    header = project.runpytest_subprocess("tasks", f"--ptx-tasks={tree}", "--collect-only")
    header.stdout.fnmatch_lines(
        [
            "ptxbench tasks: FlashInfer-Trace */tree: tasks of a family: gemm_n4096_k4096 (gemm), *",
            "ptxbench tasks: not loadable: fused_add_rmsnorm_h4096: op_type 'rmsnorm' has no ptxbench family",
        ]
    )
    bad = project.runpytest_subprocess("tasks", f"--ptx-tasks={project.path / 'nowhere'}", "--collect-only")
    bad.stdout.fnmatch_lines(["*bad task file: */nowhere: no definitions/ folder: not a FlashInfer-Trace tree*"])
