"""The kernel in a model's reply: the fenced block of the candidate's language that defines its entry point
(the task's launcher in CUDA, `run` in Triton)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..languages import Language

_OPEN = re.compile(r"^[ \t]*(`{3,})[ \t]*([^\s`]*)")


@dataclass(frozen=True)
class Block:
    language: str  # the fence's info word, lower case ("" when none)
    code: str
    closed: bool  # False: the reply ended inside the block


@dataclass(frozen=True)
class Extraction:
    source: str | None  # the kernel file, or None
    problem: str | None  # why no kernel was taken from the reply


def blocks(text: str) -> list[Block]:
    """Every fenced block of a Markdown reply, in order."""
    out: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = _OPEN.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, language = opening.group(1), opening.group(2).lower()
        body: list[str] = []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and not lines[i].strip().strip("`")):
            body.append(lines[i])
            i += 1
        out.append(Block(language, "\n".join(body) + "\n", closed=i < len(lines)))
        i += 1
    return out


def extract_kernel(
    text: str, language: Language, entry: str, refusal: str | None = None, truncated: bool = False
) -> Extraction:
    """The last closed block of `language` (```cuda, ```cu, ```cpp, ```c++; ```python, ```py) that defines
    `entry`, or the reason there is none."""
    found = blocks(text)
    accepted = [b for b in found if b.language in language.fences]
    defining = [b for b in accepted if b.closed and language.defines(b.code, entry)]
    if defining:
        return Extraction(defining[-1].code, None)
    cut = " (the reply stopped at the output-token limit)" if truncated else ""
    if refusal:
        problem = f"the reply declined ({refusal}) and holds no kernel"
    elif any(not b.closed for b in accepted):
        problem = f"the ```{accepted[-1].language} block is not closed: the code is incomplete{cut}"
    elif accepted:
        problem = f"none of the {len(accepted)} code block(s) defines {entry}"
    elif found:
        fences = ", ".join(dict.fromkeys(f"```{b.language}" for b in found))
        problem = f"the code is in {fences}, not in a ```{language.fences[0]} block"
    else:
        problem = f"the reply has no code block{cut}"
    return Extraction(None, problem)
