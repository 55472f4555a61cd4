"""The message a model gets after each turn, rendered from the structured verdicts (never from logs
searched for words).

Only the fields a stage lists in `SHOWN` reach the model: the harness's paths, tools, sandbox and timing
schedule stay out. Absolute paths inside the texts (a child's log, a linker error) are cut to their last
component."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..languages import Language
from ..task.catalogue import Family
from ..verdict import Status, Verdict

MAX_LOG_LINES = 40
MAX_LOG_CHARS = 3000
# Per stage, the data fields shown to the model, in this order (build's resources and warnings have their own lines).
SHOWN: dict[str, tuple[str, ...]] = {
    "build": (),
    "inspect": ("forbidden_imports", "forbidden_libraries", "forbidden_definitions"),
    "check": ("shape", "comparisons", "changed_inputs", "overruns"),
    "profile": ("shape", "executed", "kernels", "foreign", "tensor_flops", "task_flops"),
    "sanitize": ("shape", "findings", "unavailable"),
    "time": ("shape", "median_ms", "iqr_ms", "baseline", "baseline_median_ms", "speedup", "tflops", "floor_ms"),
}
# An absolute path of at least two components, not inside a word or a relative path.
_PATH = re.compile(r"(?<![\w.~/-])/(?:[^\s/:'\"()\[\]{},;=]+/)+([^\s/:'\"()\[\]{},;=]*)")


def expected(language: Language, family: Family) -> str:
    return (
        f"Reply with the whole {language.suffix} file in one ```{language.fences[0]} block that defines:\n"
        f"{language.signature(family)}"
    )


def no_kernel(problem: str, language: Language, family: Family) -> str:
    """Feedback for a reply from which no kernel could be taken."""
    return f"No kernel was evaluated: {problem}.\n{expected(language, family)}"


def render(verdicts: Sequence[Verdict], language: Language, family: Family) -> str:
    """One paragraph per stage, GPU stages skipped for one reason folded into one line."""
    lines: list[str] = []
    skipped: dict[str, list[str]] = {}
    names: dict[str, str] = next((v.data.get("kernels", {}) for v in verdicts if v.stage == "inspect"), {})
    for verdict in verdicts:
        if verdict.status in (Status.SKIPPED, Status.TOOL_UNAVAILABLE):
            skipped.setdefault(f"{verdict.status.value}: {verdict.message}", []).append(verdict.stage)
            continue
        if verdict.stage == "build":
            lines += _build(verdict, names)
        else:
            lines.append(f"{verdict.stage} {verdict.status.value}: {verdict.message}")
            lines += _figures(verdict.stage, verdict.data)
            if verdict.data.get("speed_of_light"):
                lines.append(f"  speed of light: {verdict.data['speed_of_light']:.1%} of the roofline")
    lines += [f"{', '.join(stages)} {why}" for why, stages in skipped.items()]
    if any(v.status is Status.FAILED for v in verdicts):
        lines.append("Fix the failures above. " + expected(language, family))
    elif verdicts and all(v.passed for v in verdicts):
        lines.append("Every stage passed. Make it faster if you can. " + expected(language, family))
    else:
        lines.append("No stage failed. Improve the kernel if you can. " + expected(language, family))
    return without_paths("\n".join(lines))


def without_paths(text: str) -> str:
    """`text` with each absolute path cut to its last component: `/tmp/run/builds/x/candidate.so` → `candidate.so`."""
    return _PATH.sub(r"\1", text)


def _build(verdict: Verdict, names: dict[str, str]) -> list[str]:
    """The compile errors, or each kernel's registers, shared memory, stack and spills (readable names
    from the inspect stage where it ran)."""
    if verdict.status is Status.FAILED:
        return [f"build failed: {_trim(verdict.message)}"]
    lines = [f"build passed: {verdict.message}"]
    for kernel, figures in sorted(verdict.data.get("resources", {}).items()):
        spills = figures.get("spill_store_bytes", 0) + figures.get("spill_load_bytes", 0)
        lines.append(
            f"  {names.get(kernel, kernel)}: {figures.get('registers', '?')} registers, {figures.get('smem_bytes', 0)} bytes static smem, "
            f"{figures.get('stack_bytes', 0)} bytes stack, {spills} bytes spilled"
        )
    lines += [f"  {w}" for w in verdict.data.get("warnings", [])]
    return lines


def _trim(log: str) -> str:
    """The head of a compiler log: errors come first, and the rest repeats them."""
    lines = log.splitlines()
    kept = "\n".join(lines[:MAX_LOG_LINES])[:MAX_LOG_CHARS]
    return kept + ("\n[... log trimmed]" if kept != log else "")


def _figures(stage: str, data: dict[str, Any]) -> list[str]:
    """The numbers of a verdict that its stage shows (wrong elements, opcodes executed, speedups), compactly."""
    return [f"  {key}: {_compact(data[key])}" for key in SHOWN.get(stage, ()) if data.get(key)]


def _compact(value: Any, depth: int = 0) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        if depth >= 2:
            return "{...}"
        return "{" + ", ".join(f"{k}: {_compact(v, depth + 1)}" for k, v in list(value.items())[:8]) + "}"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(_compact(v, depth + 1) for v in value[:5])
        return f"[{shown}{', ...' if len(value) > 5 else ''}]"
    return str(value)[:200]
