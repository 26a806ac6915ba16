"""The RL training objective of spec §4: PPO-clip with a clamped log-ratio and a k3 KL penalty to π_old.

Per row (one sampled response with advantage A) and response token t, with logπθ the log-probs being
trained and logπ_old those of the checkpoint that generated the data (one no-grad pass before any
update; spec §4 "Old log-probs")::

    d_t   = clamp(logπθ(t) − logπ_old(t), −C, C)            C = LOG_RATIO_CLAMP = 10
    ρ_t   = exp(d_t)
    L_pg  = −(1/|o|) Σ_t min(ρ_t·A, clip(ρ_t, 1−ε, 1+ε)·A)
    b_t   = logπ_old(t) − logπθ(t)
    k3_t  = exp(clamp(b_t, −C, C)) − 1 − b_t                  (k3 estimator of KL(πθ‖π_old))
    L_kl  = (1/|o|) Σ_t k3_t

|o| is the row's number of response tokens (the mask's row sum): a token mean within each row, so
every row weighs the same whatever its length. The caller forms ``L_pg + β·L_kl`` per row and the
optimizer step's sum over its rows divided by their count (:func:`rla_core.models.update.train_loop`).
Unlike TRL's ``GRPOTrainer`` both exponents are clamped (spec §4), so a token whose probability moved
far cannot overflow ``exp``.

Torch is imported inside the function, so importing this module stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import torch

# Spec §4: the log-ratio (and the k3 exponent) are clamped to [-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP] before exp().
LOG_RATIO_CLAMP = 10.0


class PpoK3Loss(NamedTuple):
    """Per-row loss parts of :func:`ppo_k3_loss`."""

    pg: torch.Tensor  # (B,) L_pg of each row
    kl: torch.Tensor  # (B,) L_kl of each row (not yet multiplied by β)
    clipped: torch.Tensor  # () response tokens whose ρ lies outside [1−ε, 1+ε] (detached, float)


def ppo_k3_loss(
    logps: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip_eps: float
) -> PpoK3Loss:
    """Spec §4 per-row PPO-clip loss and k3 KL (token means over each row's response), plus the clip count.

    Shapes: ``logps`` (B, T) log πθ of each response token (with grad), ``old`` (B, T) log π_old,
    ``mask`` (B, T) 1.0 on response tokens and 0.0 on right padding, ``adv`` (B, 1) each row's
    advantage A; ``clip_eps`` is ε. Returns ``PpoK3Loss(pg (B,), kl (B,), clipped ())``. A row with
    no token (all-zero mask) gets 0 for both parts.

    Example: one row, two tokens; token 0 became 1.5x likelier than under π_old, token 1 is unchanged.

        >>> import math, torch
        >>> logps = torch.tensor([[math.log(1.5), 0.0]])
        >>> out = ppo_k3_loss(logps, torch.zeros(1, 2), torch.tensor([[1.0]]), torch.ones(1, 2), 0.2)
        >>> round(float(out.pg[0]), 4)  # -(min(1.5, 1.2) + 1) / 2
        -1.1
        >>> round(float(out.kl[0]), 4)  # (2/3 - 1 + ln 1.5 + 0) / 2
        0.0361
        >>> float(out.clipped)  # ρ = 1.5 is outside [0.8, 1.2]
        1.0
    """
    import torch

    d = torch.clamp(logps - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(d)
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    back = old - logps  # log(π_old/πθ)
    k3 = torch.exp(torch.clamp(back, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)) - 1 - back
    lengths = mask.sum(-1).clamp(min=1.0)
    pg = -(surrogate * mask).sum(-1) / lengths
    kl = (k3 * mask).sum(-1) / lengths
    clipped = (((ratio < 1 - clip_eps) | (ratio > 1 + clip_eps)).float() * mask).sum().detach()
    return PpoK3Loss(pg, kl, clipped)
