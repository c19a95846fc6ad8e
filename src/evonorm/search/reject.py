"""`Reject`: how an objective, or a check before it, rejects a candidate layer (stdlib only, so
that the checks and the objective protocol both use it without importing each other)."""

from __future__ import annotations

from typing import Mapping


class Reject(Exception):
    """Raised by an objective to reject the candidate layer with `reason` (stored as given).

    `step` and `detail` say where and what was measured; `scores` what was measured before the
    rejection (per objective name), kept with the rejected candidate.
    """

    def __init__(self, reason: str = "rejected", *, step: int | None = None,
                 detail: dict | None = None, scores: Mapping[str, float] | None = None):
        super().__init__(reason)
        self.reason = str(reason)[:300] or "rejected"
        self.step = step
        self.detail = detail
        self.scores = dict(scores or {})
