"""What the model calls of one run have used, shared by every trajectory and xdist worker of the run
through one append-only file, so spend and token caps hold per run."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ledger:
    path: Path  # <run dir>/model-usage.jsonl

    def add(self, trajectory: str, tokens: int, cost: float | None) -> None:
        line = (json.dumps({"trajectory": trajectory, "tokens": tokens, "cost": cost}) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def totals(self) -> tuple[int, float]:
        """(tokens, USD) so far; calls without a price add no USD."""
        if not self.path.exists():
            return 0, 0.0
        entries = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        return sum(e["tokens"] for e in entries), sum(e["cost"] or 0.0 for e in entries)

    def exceeded(self, spend_cap: float | None, token_cap: int | None) -> str | None:
        """Which cap the run has reached, in words, or None."""
        tokens, spent = self.totals()
        if spend_cap is not None and spent >= spend_cap:
            return f"spend cap reached (${spent:.4f} of ${spend_cap:g})"
        if token_cap is not None and tokens >= token_cap:
            return f"token cap reached ({tokens} of {token_cap} tokens)"
        return None
