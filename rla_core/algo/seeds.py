"""The project's seed derivation: one seed per named piece of work, independent of order and batching.

A stage has one seed (its run seed, iteration and name); everything sampled inside it — an episode, a
judgment, a rewrite, a noisy oracle's flip — draws from ``derive_seed(stage_seed, <what>, <its key>...)``,
so a row never depends on which other rows were computed with it, in which order or on which shard.

Example:
    >>> derive_seed(7, "judge", "task-a", 0, 3) == derive_seed(7, "judge", "task-a", 0, 3)
    True
    >>> derive_seed(7, "judge", "task-a", 0, 3) != derive_seed(7, "judge", "task-a", 0, 4)
    True
"""

from __future__ import annotations

import hashlib
import json

SEED_BITS = 63  # derive_seed's range: [0, 2**63), so a seed fits a signed 64-bit integer


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed from ``seed`` and key parts (sha256 of their JSON), independent of call order."""
    payload = json.dumps([seed, *[str(p) for p in parts]])
    return int.from_bytes(hashlib.sha256(payload.encode("utf-8")).digest()[:8], "big") >> 1


def derive_uniform(seed: int, *parts: object) -> float:
    """A number in [0, 1) drawn from :func:`derive_seed` of the same arguments (a seeded coin per key).

    Example:
        >>> 0.0 <= derive_uniform(1, "flip", "t", 0, 2) < 1.0
        True
    """
    return derive_seed(seed, *parts) / 2**SEED_BITS


def turn_seed(episode_seed: int, turn: int) -> int:
    """The sampling seed of an episode's assistant turn ``turn`` (0-based): a function of the episode's own
    seed and the turn's index only, never of when its request arrived or what was generated beside it.

    The recording endpoint (:mod:`rla_core.models.endpoint`) samples each chat request with it: the
    request carries the episode's seed (``seed``, passed by the adapter) and the turn index is the number
    of assistant messages the request's conversation already holds.

    Example:
        >>> turn_seed(5, 0) == derive_seed(5, "turn", 0) != turn_seed(5, 1)
        True
    """
    if turn < 0:
        raise ValueError(f"turn={turn}: a turn index is 0 or more")
    return derive_seed(episode_seed, "turn", turn)
