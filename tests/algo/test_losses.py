"""The spec §4 objective (rla_core.algo.losses.ppo_k3_loss), checked against hand-computed values."""

from __future__ import annotations

import doctest
import math
import re
from pathlib import Path

import pytest
import torch

from rla_core.algo import losses
from rla_core.algo.losses import LOG_RATIO_CLAMP, ppo_k3_loss

EPS = 0.2  # spec §4 ε: the trust region is [0.8, 1.2]


def test_ppo_k3_hand_computed() -> None:
    old = torch.zeros(2, 2)
    # Row 0: d = [ln 1.5, 0]; row 1: d = [ln 0.5, (masked)].
    logps = torch.tensor([[math.log(1.5), 0.0], [math.log(0.5), 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([[1.0], [-1.0]])
    pg, kl, clipped = ppo_k3_loss(logps, old, adv, mask, EPS)
    # Row 0, A=+1: token 0 ρ = 1.5, min(1.5·1, clip(1.5)=1.2 · 1) = 1.2; token 1 ρ = e^0 = 1 → 1.
    #   pg = -(1.2 + 1) / 2 tokens = -1.1.
    # Row 1, A=-1: token 0 ρ = 0.5, min(0.5·-1, clip(0.5)=0.8 · -1) = min(-0.5, -0.8) = -0.8; token 1 masked.
    #   pg = -(-0.8) / 1 token = 0.8.
    assert pg.tolist() == pytest.approx([-1.1, 0.8])
    # k3 row 0: b = 0 - ln 1.5 → e^b = 2/3; k3 = 2/3 - 1 - (-ln 1.5) = 0.0721318; token 1: e^0 - 1 - 0 = 0.
    #   kl = (0.0721318 + 0) / 2 = 0.0360659.
    # k3 row 1: b = 0 - ln 0.5 = ln 2 → e^b = 2; k3 = 2 - 1 - ln 2 = 0.3068528; one token → kl = 0.3068528.
    assert kl.tolist() == pytest.approx([(2 / 3 - 1 + math.log(1.5)) / 2, 1 - math.log(2)])
    # Unmasked tokens with ρ outside [0.8, 1.2]: 1.5 (row 0) and 0.5 (row 1) → 2; the masked ρ = 1 never counts.
    assert float(clipped) == 2.0
    assert clipped.requires_grad is False  # a metric, detached


def test_log_ratio_and_k3_exponent_are_clamped() -> None:
    assert LOG_RATIO_CLAMP == 10.0
    old = torch.zeros(2, 1)
    # Row 0: logπθ - logπ_old = +20; row 1: -20. Both A = -1 (the unclipped branch of min for row 0).
    logps = torch.tensor([[20.0], [-20.0]])
    adv = torch.tensor([[-1.0], [-1.0]])
    pg, kl, clipped = ppo_k3_loss(logps, old, adv, torch.ones(2, 1), EPS)
    # Row 0: d = clamp(20, -10, 10) = 10 → ρ = e^10 = 22026.4658; min(-e^10, -1.2) = -e^10 → pg = e^10
    #   (unclamped it would be e^20 = 4.85e8).
    # Row 1: d = -10 → ρ = e^-10 = 4.54e-5; min(-4.54e-5, clip → 0.8 · -1 = -0.8) = -0.8 → pg = 0.8.
    assert pg.tolist() == pytest.approx([math.exp(10), 0.8])
    # k3 row 0: b = 0 - 20 = -20 → clamp → -10; e^-10 - 1 - (-20) = 19.0000454 (the linear term is not clamped).
    # k3 row 1: b = 20 → clamp → 10; e^10 - 1 - 20 = 22005.4658 (unclamped: e^20 - 21 = 4.85e8).
    assert kl.tolist() == pytest.approx([math.exp(-10) + 19, math.exp(10) - 21])
    assert float(clipped) == 2.0  # both ρ are far outside [0.8, 1.2]
    assert torch.isfinite(pg).all() and torch.isfinite(kl).all()


def test_gradients_follow_the_clip_branches() -> None:
    # One row, A = +1, two tokens: ρ = 1.1 (inside the trust region) and ρ = 1.5 (clipped above).
    logps = torch.tensor([[math.log(1.1), math.log(1.5)]], requires_grad=True)
    pg, kl, _ = ppo_k3_loss(logps, torch.zeros(1, 2), torch.tensor([[1.0]]), torch.ones(1, 2), EPS)
    # pg = -(min(1.1, 1.1) + min(1.5, 1.2)) / 2 = -(1.1 + 1.2) / 2 = -1.15.
    assert float(pg[0]) == pytest.approx(-1.15)
    (grad,) = torch.autograd.grad(pg.sum(), logps, retain_graph=True)
    # Token 0: d(-ρ·A/2)/d logπθ = -ρ·A/2 = -1.1/2 = -0.55 (ρ = e^d, dρ/dd = ρ).
    # Token 1: the min picks the constant clip(ρ)·A = 1.2, so no gradient: 0.
    assert grad[0].tolist() == pytest.approx([-0.55, 0.0])
    (grad_kl,) = torch.autograd.grad(kl.sum(), logps)
    # k3 = e^b - 1 - b with b = logπ_old - logπθ: dk3/dlogπθ = -e^b + 1 = 1 - 1/ρ.
    # Token 0: (1 - 1/1.1) / 2 = 0.0454545; token 1: (1 - 1/1.5) / 2 = 0.1666667 (the KL pulls back on both).
    assert grad_kl[0].tolist() == pytest.approx([(1 - 1 / 1.1) / 2, (1 - 1 / 1.5) / 2])


def test_a_row_without_tokens_contributes_nothing() -> None:
    logps = torch.tensor([[0.5, -0.5]], requires_grad=True)
    pg, kl, clipped = ppo_k3_loss(logps, torch.zeros(1, 2), torch.tensor([[1.0]]), torch.zeros(1, 2), EPS)
    # Mask sum 0 → the length is clamped to 1 and both sums are 0: pg = kl = 0, no token counted.
    assert (float(pg[0]), float(kl[0]), float(clipped)) == (0.0, 0.0, 0.0)
    (grad,) = torch.autograd.grad((pg + kl).sum(), logps)
    assert grad.tolist() == [[0.0, 0.0]]


def test_docstring_example_runs() -> None:
    result = doctest.testmod(losses, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


def test_the_clamp_is_declared_once() -> None:
    root = Path(__file__).resolve().parents[2] / "rla_core"
    declared = [
        str(p.relative_to(root.parent))
        for p in sorted(root.rglob("*.py"))
        if re.search(r"^LOG_RATIO_CLAMP\s*[:=]", p.read_text(encoding="utf-8"), re.M)
    ]
    assert declared == ["rla_core/algo/losses.py"]
