"""Teacher repairs for `ptxbench fixit --teacher MODEL`: the teacher is asked for a minimal repair of each
failed turn; its kernel goes through the pipeline (on the task's visible shapes, GPU stages where a device
is) and is kept only when it is verified at the level asked for."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..agent.extract import extract_kernel
from ..agent.models import ModelClient, ModelError
from ..candidate import Candidate
from ..device import detect_devices
from ..pipeline import Pipeline
from ..rundir import RunDirectory, task_set_hash
from ..targets import TARGETS
from ..task.catalogue import Family, load_catalogue
from .fixit import LEVELS, FailedTurn, example, verification
from .runs import RunError


@dataclass
class Teaching:
    """The rows kept, and why each dropped repair was dropped."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def teach(
    failures: Sequence[FailedTurn],
    client: ModelClient,
    teacher: str,
    catalogue: Path,
    settings: dict[str, Any],
    level: str = "static",
) -> Teaching:
    """Ask `client` to repair each failed turn; verify each repair through the pipeline in a scratch run
    directory; keep the ones verified at `level` or better."""
    families = {f.name: f for f in load_catalogue(catalogue)}
    tasks_hash = task_set_hash(sorted(catalogue.glob("*.yaml")))
    out = Teaching()
    with tempfile.TemporaryDirectory(prefix="ptxbench-fixit-") as scratch:
        devices = detect_devices()  # once: the pipeline asks for them at every evaluation
        pipeline = Pipeline(RunDirectory(Path(scratch)), lambda: devices, settings)
        try:
            for failed in failures:
                family = _family(failed, families, tasks_hash, catalogue)
                dropped = _repair(failed, family, client, teacher, pipeline, level, out)
                if dropped:
                    out.dropped.append(f"{failed.record.path.stem} turn {failed.turn['turn']}: {dropped}")
        finally:
            pipeline.close()
    return out


def _family(failed: FailedTurn, families: dict[str, Family], tasks_hash: str, catalogue: Path) -> Family:
    if failed.run.task_set != tasks_hash:
        raise RunError(
            f"{failed.run.path / 'environment.json'}: task set {failed.run.task_set} differs from {catalogue}'s "
            f"{tasks_hash}: verify repairs against the catalogue the run used"
        )
    return families[failed.ptxbench["family"]]


def _repair(
    failed: FailedTurn,
    family: Family,
    client: ModelClient,
    teacher: str,
    pipeline: Pipeline,
    level: str,
    out: Teaching,
) -> str | None:
    """Add the teacher's verified repair to `out`, or say why there is none."""
    try:
        reply = client.complete(failed.record.system, [{"role": "user", "content": failed.prompt()}])
    except ModelError as exc:
        return f"the teacher failed: {exc}"
    language = failed.language
    extraction = extract_kernel(reply.text, language, language.entry(family), reply.refusal, reply.truncated)
    if extraction.source is None:
        return f"no kernel in the reply: {extraction.problem}"
    info = failed.ptxbench
    task = next(t for t in family.tasks if t.name == info["task"])
    target = TARGETS[info["target"]]
    origin = f"{teacher} repair of {failed.record.path.stem}"
    candidate = Candidate(task.name, target.name, extraction.source, origin, language.name)
    verdicts = pipeline.evaluate(candidate, family, task, target, family.shapes("visible"))
    judged = {"kernel": candidate.origin, "verdicts": [v.to_json() for v in verdicts]}
    found, speedup = verification(judged)
    if found is None or LEVELS[found] < LEVELS[level]:
        failures = "; ".join(
            f"{v.stage} {v.status.value}: {v.message.splitlines()[0] if v.message else ''}"
            for v in verdicts
            if not v.passed
        )
        return f"the repair is not verified ({failures})"
    out.rows.append(example(failed, extraction.source, f"teacher:{teacher}", found, speedup, None))
    return None
