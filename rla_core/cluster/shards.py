"""Deterministic shards of a stage's work: contiguous slices of its canonical order (pure).

A generating stage's rows are ordered canonically (rollouts by task order, rollout id, step; judgments
by the steps they judge), and each row is sampled from its own seeded stream, so a row does not depend
on which other rows were computed beside it. Cutting the canonical order into contiguous slices and
concatenating the slices' results in slice order therefore gives the unsharded result, row order
included, whatever the number of shards.

Example:
    >>> [list(r) for r in split_even(7, 3)]
    [[0, 1, 2], [3, 4], [5, 6]]
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rla_core.stage_inputs import RolloutRequest


def split_even(total: int, shards: int) -> list[range]:
    """``range(total)`` cut into at most ``shards`` contiguous, non-empty slices whose sizes differ by ≤ 1
    (the first ``total % shards`` slices are one longer)."""
    if shards < 1:
        raise ValueError(f"shards={shards} must be at least 1")
    count = min(shards, total)
    if count == 0:
        return []
    base, extra = divmod(total, count)
    out, start = [], 0
    for i in range(count):
        size = base + (1 if i < extra else 0)
        out.append(range(start, start + size))
        start += size
    return out


def episode_shards(request: RolloutRequest, shards: int) -> list[RolloutRequest]:
    """``request`` cut into ≤ ``shards`` requests over contiguous runs of its episodes in canonical order
    (task order, then rollout id); each shard keeps every task (so each validates the same specs) and
    plays only its ``episodes``."""
    episodes = request.episode_keys()
    return [
        replace(request, episodes=tuple(episodes[i] for i in part))
        for part in split_even(len(episodes), shards)
    ]
