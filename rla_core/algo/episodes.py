"""Episode status: won, lost, or env_error (our machinery failed), and the rules that follow from it.

An episode that ended because a desktop, browser or sandbox failed says nothing about the policy. It is
recorded with status ``env_error``, a null outcome, an error kind and a one-line message
(docs/environment-errors.md), retried, and then left out of everything that measures or trains the policy:
these functions are the one place that says so. Frames written before the status existed have a null
``status``: it derives from the outcome (+1 won, otherwise lost), so old runs read as they always did.

Pure polars over 'rollouts' (one row per step) or 'eval' (one row per episode) frames.

Example:
    >>> import polars as pl
    >>> r = pl.DataFrame({"task_id": ["a", "a", "a"], "rollout_id": [0, 1, 2],
    ...                   "outcome": [1.0, None, -1.0], "status": ["won", "env_error", None]})
    >>> r.select(episode_status(r))["status"].to_list()
    ['won', 'env_error', 'lost']
    >>> played(r)["rollout_id"].to_list()
    [0, 2]
"""

from __future__ import annotations

from enum import StrEnum

import polars as pl

from rla_core.errors import EnvErrorShareError

EPISODE_KEYS: tuple[str, ...] = ("task_id", "rollout_id")


class EnvErrorKind(StrEnum):
    """Which part of our machinery failed in an ``env_error`` episode (``rollouts.error_kind``).

    Raised as :class:`~rla_core.errors.EnvironmentFault` by an episode (``rla_core.envs``); where each engine draws the line
    between these and the policy's own failures: docs/environment-errors.md.
    """

    DESKTOP = "desktop"  # the desktop (its VM/container or X server) did not start or died
    DESKTOP_SERVER = "desktop_server"  # the server inside the desktop stopped answering
    SETUP = "setup"  # the task's set-up steps failed before the first action
    BROWSER = "browser"  # the browser or its driver died
    BROWSER_TIMEOUT = "browser_timeout"  # a browser call exceeded its timeout (the browser was killed)
    NO_ACTIONS = "no_actions"  # the page or desktop offered no admissible action: it broke
    SANDBOX = "sandbox"  # the code sandbox died under a program (coding)
    PLUGIN = "plugin"  # an environment plug-in raised or returned something malformed (docs/environments.md)


class WinRule(StrEnum):
    """When a scored episode is won, per kind of score (each engine declares its kind).

    ``FULL_SCORE``: a score in [0, 1] where 1 is the task done (an environment plug-in's ``score``);
    ``ANY_CREDIT``: the task's reward, where any credit counts (GUI tasks: MiniWoB++'s raw reward and
    OSWorld's evaluator, spec §2.1 as the reference code scores it).
    """

    FULL_SCORE = "full_score"
    ANY_CREDIT = "any_credit"


def is_won(score: float, rule: WinRule) -> bool:
    """Whether an episode that ended with ``score`` is won under ``rule``.

    Example (hand-computed):
        >>> [is_won(s, WinRule.FULL_SCORE) for s in (0.0, 0.5, 1.0)]
        [False, False, True]
        >>> [is_won(s, WinRule.ANY_CREDIT) for s in (0.0, 0.5, 1.0)]
        [False, True, True]
    """
    if rule is WinRule.FULL_SCORE:
        return score >= 1.0
    return score > 0.0


class EpisodeStatus(StrEnum):
    """How an episode ended (``rollouts.status``, ``eval.status``)."""

    WON = "won"
    LOST = "lost"
    ENV_ERROR = "env_error"


def episode_status(frame: pl.DataFrame) -> pl.Expr:
    """The ``status`` column, derived from ``outcome`` (+1 won, otherwise lost) where it is null (old rows)."""
    derived = (
        pl.when(pl.col("outcome") > 0)
        .then(pl.lit(EpisodeStatus.WON.value))
        .otherwise(pl.lit(EpisodeStatus.LOST.value))
    )
    if "status" not in frame.columns:
        return derived.alias("status")
    return pl.coalesce(pl.col("status"), derived).alias("status")


def is_env_error(frame: pl.DataFrame) -> pl.Expr:
    """True on the rows of ``env_error`` episodes (never on rows written before the status existed)."""
    if "status" not in frame.columns:
        return pl.lit(False)
    return (pl.col("status") == EpisodeStatus.ENV_ERROR.value).fill_null(False)


def played(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` without the rows of ``env_error`` episodes: what the policy actually won or lost."""
    return frame.filter(~is_env_error(frame))


def env_error_counts(frame: pl.DataFrame) -> tuple[int, int]:
    """(episodes in ``env_error``, all episodes) of a 'rollouts' or 'eval' frame."""
    eps = frame.select(*EPISODE_KEYS, is_env_error(frame).alias("_err")).unique(EPISODE_KEYS)
    return int(eps["_err"].sum()), eps.height


def env_error_rate(frame: pl.DataFrame) -> float | None:
    """Share of the episodes of ``frame`` that ended in ``env_error``; None without episodes."""
    errors, total = env_error_counts(frame)
    return errors / total if total else None


def check_env_error_share(frame: pl.DataFrame, *, max_share: float, where: str) -> None:
    """Raise :class:`EnvErrorShareError` when more than ``max_share`` of the episodes are in ``env_error``.

    Reads ``task_id, rollout_id, status`` and, for the message, ``error_kind, error_message``. A broken
    cluster must stop a run rather than feed it: the stage fails, is not committed, and ``rla resume``
    plays it again.

    Example:
        >>> f = pl.DataFrame({"task_id": ["a", "b"], "rollout_id": [0, 0], "status": ["env_error", "won"],
        ...                   "error_kind": ["desktop", None], "error_message": ["X died", None]})
        >>> check_env_error_share(f, max_share=0.5, where="rollout")  # 1 of 2 is not above 0.5
    """
    errors, total = env_error_counts(frame)
    if not total or errors / total <= max_share:
        return
    failed = frame.filter(is_env_error(frame)).unique(EPISODE_KEYS, keep="first", maintain_order=True)
    first = "; ".join(
        f"{r['task_id']}#{r['rollout_id']} {r['error_kind']}: {r['error_message']}"
        for r in failed.head(3).iter_rows(named=True)
    )
    kinds = set(failed["error_kind"].drop_nulls().to_list()) if "error_kind" in failed.columns else set()
    culprits = []
    if EnvErrorKind.PLUGIN in kinds:  # the plug-in's own code raised or returned something malformed
        culprits.append(
            "the environment plug-in's code is failing (error_kind plugin: each message names the plug-in, "
            "the call and the task): fix it, bump its package's version"
        )
    if kinds - {EnvErrorKind.PLUGIN} or not kinds:
        culprits.append("the environment machinery (desktops, browsers, sandbox) is failing: fix it")
    advice = "; ".join(culprits)
    raise EnvErrorShareError(
        f"{where}: {errors} of {total} episodes ({errors / total:.0%}) still ended in env_error after their "
        f"retries, above rollout.max_env_error_share={max_share:g}; first errors: {first}. "
        f"{advice[:1].upper()}{advice[1:]} and run `rla resume`, which plays this stage again "
        "(docs/environment-errors.md)"
    )
