"""A candidate: one source file (CUDA `.cu`, Triton `.py`) written for one task and target, as the agent handed
it over."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path


def digest(text: str) -> str:
    """The short sha256 that names a kernel source (and any text recorded beside it)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Candidate:
    task: str  # "gemm-n7168-k5120"
    target: str  # "h100"
    source: str  # the whole file
    origin: str  # where it came from: a path, or "model turn 3"
    lang: str = "cuda"  # a key of languages.LANGUAGES

    @property
    def digest(self) -> str:
        return digest(self.source)

    @classmethod
    def from_file(cls, task: str, target: str, path: Path, lang: str = "cuda") -> Candidate:
        return cls(task, target, path.read_text(errors="replace"), str(path), lang)
