"""Environment adaptation rules: which way to rewrite a task, and whether to accept a rewrite (spec §3).

The same two rules serve all settings; the per-setting differences are config values
(``AdaptationConfig.low_inclusive`` is False for coding, where "easier" needs ``acc < 0.2``).

Example:
    >>> from rla_core.config import AdaptationConfig
    >>> cfg = AdaptationConfig()
    >>> goal_from_acc(0.875, cfg=cfg)
    <Goal.HARDER: 'harder'>
    >>> accept_variant(0.5, 0.875, Goal.HARDER, cfg=cfg).accepted
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rla_core.algo.labels import ACC_TOL
from rla_core.config import AdaptationConfig
from rla_core.errors import RegistryError


class Goal(StrEnum):
    """Direction of a task rewrite (spec §3 ``direction(acc)``)."""

    HARDER = "harder"
    EASIER = "easier"
    KEEP = "keep"


@dataclass(frozen=True)
class Decision:
    """Whether a pending variant is accepted, and why (logged in the ``decisions`` artifact)."""

    accepted: bool
    reason: str


def goal_from_acc(acc: float, *, cfg: AdaptationConfig) -> Goal:
    """Rewrite direction for a task with success rate ``acc`` (spec §3).

    ``HARDER`` if ``acc >= alpha_high``; ``EASIER`` if ``acc <= alpha_low`` (``acc < alpha_low``
    when ``cfg.low_inclusive`` is False, as in coding); otherwise ``KEEP`` (no rewrite).

    Example:
        >>> goal_from_acc(0.2, cfg=AdaptationConfig(low_inclusive=False))
        <Goal.KEEP: 'keep'>
    """
    if not 0.0 <= acc <= 1.0:
        raise ValueError(f"acc={acc} is not a success rate in [0, 1]")
    if acc >= cfg.alpha_high - ACC_TOL:
        return Goal.HARDER
    easier = acc <= cfg.alpha_low + ACC_TOL if cfg.low_inclusive else acc < cfg.alpha_low - ACC_TOL
    return Goal.EASIER if easier else Goal.KEEP


def accept_variant(new_acc: float, prev_acc: float, goal: Goal | str, *, cfg: AdaptationConfig) -> Decision:
    """Accept or reject a pending variant from its accuracy on this iteration's rollouts (spec §3).

    Accepted iff ``new_acc > 0`` (at least one success: the variant is solvable) and

    * ``goal = harder``: ``new_acc < prev_acc`` and ``new_acc >= accept_band.low``;
    * ``goal = easier``: ``new_acc > prev_acc`` and ``new_acc <= accept_band.high``.

    The reason names the rule that decided. A ``keep`` goal has no rewrite to decide and raises
    :class:`RegistryError`.

    Example:
        >>> accept_variant(0.0, 0.1, "easier", cfg=AdaptationConfig()).reason
        'rejected: new_acc=0 (no rollout succeeded, the variant may be unsolvable)'
    """
    try:
        g = Goal(goal)
    except ValueError:
        raise RegistryError(
            f"unknown goal {goal!r} for a pending variant; choose one of: {', '.join(x.value for x in Goal)}"
        ) from None
    if g is Goal.KEEP:
        raise RegistryError(
            "a pending variant with goal 'keep' cannot be decided: only 'harder' or 'easier' rewrites are "
            "proposed (goal_from_acc returned KEEP, so no variant should exist)"
        )
    for name, value in (("new_acc", new_acc), ("prev_acc", prev_acc)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}={value} is not a success rate in [0, 1]")
    band = cfg.accept_band
    if new_acc <= ACC_TOL:
        return Decision(False, "rejected: new_acc=0 (no rollout succeeded, the variant may be unsolvable)")
    if g is Goal.HARDER:
        if not new_acc < prev_acc - ACC_TOL:
            return Decision(
                False, f"rejected: harder variant not harder (new_acc={new_acc:g} >= prev_acc={prev_acc:g})"
            )
        if new_acc < band.low - ACC_TOL:
            return Decision(False, f"rejected: harder variant too hard (new_acc={new_acc:g} < {band.low:g})")
        return Decision(True, f"accepted: harder ({prev_acc:g} -> {new_acc:g}, >= {band.low:g})")
    if not new_acc > prev_acc + ACC_TOL:
        return Decision(
            False, f"rejected: easier variant not easier (new_acc={new_acc:g} <= prev_acc={prev_acc:g})"
        )
    if new_acc > band.high + ACC_TOL:
        return Decision(False, f"rejected: easier variant too easy (new_acc={new_acc:g} > {band.high:g})")
    return Decision(True, f"accepted: easier ({prev_acc:g} -> {new_acc:g}, <= {band.high:g})")
