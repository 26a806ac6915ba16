"""Environment adaptation rules: which way to rewrite a task, whether a candidate rewrite is a valid
variant of it, and whether to accept a rewrite once played (spec §3).

The same rules serve all settings; the per-setting differences are config values
(``AdaptationConfig.low_inclusive`` is False for coding, where "easier" needs ``acc < 0.2``) and each
engine's declared :class:`VariantSpace` (what a rewrite may change, what makes a task harder).

Example:
    >>> from rla_core.config import AdaptationConfig
    >>> cfg = AdaptationConfig()
    >>> goal_from_acc(0.875, cfg=cfg)
    <Goal.HARDER: 'harder'>
    >>> accept_variant(0.5, 0.875, Goal.HARDER, cfg=cfg).accepted
    True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rla_core.algo.labels import ACC_TOL
from rla_core.config import AdaptationConfig
from rla_core.errors import RegistryError
from rla_core.plugins import bounds_problem


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


@dataclass(frozen=True)
class VariantSpace:
    """What a rewrite of a task may change, declared once by its engine (spec §3.2-3.3).

    ``bounds``: integer spec keys with their inclusive bounds (a candidate outside them is outside the
    space); ``closed``: the spec has exactly the keys of ``bounds`` (no other, none missing).
    ``changes``: the keys a rewrite may change (None: the keys of ``bounds``); every other key, of the
    candidate or of the root, must equal the root task's — the candidate stays anchored to the root.
    The goal's direction: ``difficulty`` keys (a harder variant raises at least one and lowers none, an
    easier one the reverse), or a ``measure`` (harder: the candidate's measure is larger than the
    parent's; easier: smaller), or neither (the engine's check decides: no direction rule).
    ``anchor_radius``: each difficulty key lies at most this far from the root's value. ``owner`` names
    the space in the reasons ("plug-in 'numberline'"); None leaves them unprefixed.

    The plug-ins' :class:`~rla_core.plugins.RewriteSpace` (bounds, difficulty keys, radius) is one; the
    TextWorld games' (bounds, difficulty keys, radius 3, the seed kept) is another.
    """

    bounds: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    difficulty: tuple[str, ...] = ()
    measure: Callable[[dict[str, Any]], Any] | None = None
    anchor_radius: int | None = None
    changes: frozenset[str] | None = None
    closed: bool = False
    owner: str | None = None

    def __post_init__(self) -> None:
        if self.difficulty and self.measure is not None:
            raise ValueError("a variant space measures difficulty by its keys or by a measure, not both")
        unbounded = [k for k in self.difficulty if k not in self.bounds]
        if unbounded:
            raise ValueError(
                f"difficulty keys {unbounded} have no bounds: a difficulty key is an integer key"
            )

    def outside(self, spec: Mapping[str, Any]) -> str | None:
        """Why ``spec`` lies outside the space's keys and bounds, or None."""
        problem = self._keys_problem(spec)
        if problem is None or self.owner is None:
            return problem
        return f"outside {self.owner}'s rewrite space: {problem}"

    def _keys_problem(self, spec: Mapping[str, Any]) -> str | None:
        if self.closed:
            unknown = sorted(set(spec) - set(self.bounds))
            missing = sorted(set(self.bounds) - set(spec))
            if unknown:
                return f"unknown keys {unknown}; allowed keys are {sorted(self.bounds)}"
            if missing:
                return f"incomplete: missing keys {missing}"
        return bounds_problem(spec, self.bounds)


def variant_problem(
    spec: Mapping[str, Any],
    *,
    parent: Mapping[str, Any],
    root: Mapping[str, Any],
    goal: Goal,
    space: VariantSpace,
) -> str | None:
    """Why ``spec`` is not a valid ``goal`` rewrite of ``parent`` (a version of the slot whose first
    version is ``root``) in ``space``, or None. The first failing rule is the reason, in this order:

    1. inside the space (:meth:`VariantSpace.outside`: keys, integers, bounds);
    2. anchored to the root: every key the space does not let change equals the root's;
    3. not identical to the parent (as canonical JSON);
    4. moves in the goal's direction (difficulty keys or measure; no rule without either);
    5. each difficulty key within ``anchor_radius`` of the root's value.

    Every engine's rewrites go through this one rule; an engine adds only its own checks before it (a
    well-formed spec) or after it (the planner, the page, the desktop, a plug-in's ``check_variant``).

    Example (hand-computed: root and parent have distance 2, radius 4, bounds 1..8):
        >>> line = VariantSpace(bounds={"distance": (1, 8)}, difficulty=("distance",), anchor_radius=4)
        >>> base = {"distance": 2, "seed": 0}
        >>> variant_problem({"distance": 3, "seed": 0}, parent=base, root=base, goal=Goal.HARDER, space=line)
        >>> variant_problem({"distance": 1, "seed": 0}, parent=base, root=base, goal=Goal.HARDER, space=line)
        "not harder than the parent: changes {'distance': -1}"
        >>> variant_problem({"distance": 3, "seed": 7}, parent=base, root=base, goal=Goal.HARDER, space=line)
        "off-anchor: changes ['seed'] of the root task, which a rewrite must keep"
    """
    if goal is Goal.KEEP:
        raise ValueError("a rewrite goes 'harder' or 'easier'; 'keep' asks for no rewrite")
    outside = space.outside(spec)
    if outside is not None:
        return outside
    may_change = space.changes if space.changes is not None else frozenset(space.bounds)
    kept = sorted(k for k in set(spec) | set(root) if k not in may_change and spec.get(k) != root.get(k))
    if kept:
        if space.owner is not None:
            return f"outside {space.owner}'s rewrite space: changes {kept}, which a rewrite must keep"
        return f"off-anchor: changes {kept} of the root task, which a rewrite must keep"
    if _canonical(spec) == _canonical(parent):
        return "identical to the parent task"
    sign = 1 if goal is Goal.HARDER else -1
    if space.difficulty:
        deltas = {k: spec[k] - parent[k] for k in space.difficulty}
        if any(sign * d < 0 for d in deltas.values()) or not any(sign * d > 0 for d in deltas.values()):
            return f"not {goal.value} than the parent: changes {deltas}"
    elif space.measure is not None:
        before, after = space.measure(dict(parent)), space.measure(dict(spec))
        if (after <= before) if goal is Goal.HARDER else (after >= before):
            return f"not {goal.value} than the parent: difficulty {before} -> {after}"
    if space.anchor_radius is not None:
        for key in space.difficulty:
            if abs(spec[key] - root[key]) > space.anchor_radius:
                return f"off-anchor: {key}={spec[key]} is more than {space.anchor_radius} from the root's {root[key]}"
    return None


def _canonical(spec: Mapping[str, Any]) -> str:
    return json.dumps(dict(spec), sort_keys=True, separators=(",", ":"), default=str)
