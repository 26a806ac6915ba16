"""The arms of a study (``rla study``): each arm's ablation switches on top of the study's base config.

Plain data with no imports, so the command line can list the arms in its help without loading the study's
machinery (:mod:`flows.study`).
"""

from __future__ import annotations

# The oracle diagnostic: the policy arm with the engine's labels as the step votes (no judge runs).
ORACLE = ("training.reward.enabled=false", "adaptation.enabled=false", "judge.source=oracle")
# Arm → the ablation switches it sets on top of the study's base config (flows/loop.py docstring).
ARMS: dict[str, tuple[str, ...]] = {
    "outcome-only": (
        "reward.use_stepwise=false",
        "training.reward.enabled=false",
        "adaptation.enabled=false",
    ),
    "policy": ("training.reward.enabled=false", "adaptation.enabled=false"),
    "reward": ("adaptation.enabled=false",),
    "full": (),
    "stepwise-only": ("reward.use_outcome=false", "adaptation.enabled=false"),
    "reward-balanced": ("adaptation.enabled=false", "reward.rm_outcome_balance=true"),
    "full-balanced": ("reward.rm_outcome_balance=true",),
    "oracle-stepwise": ORACLE,
    # Noisy oracles: the oracle's votes of a step turned over with probability p (both labels), or good → bad
    # only (a judge that calls most steps bad); the votes' balanced accuracy is 1 - (good + bad) / 2.
    **{
        f"oracle-p{round(p * 100):02d}": (
            *ORACLE,
            f"judge.oracle_flip.good={p}",
            f"judge.oracle_flip.bad={p}",
        )
        for p in (0.1, 0.25, 0.4, 0.45)
    },
    "oracle-good80": (*ORACLE, "judge.oracle_flip.good=0.8"),
}
# Arms that read what the method never sees (the engine's optimal actions): diagnostics, marked in tables.
PRIVILEGED_ARMS = frozenset(arm for arm, switches in ARMS.items() if "judge.source=oracle" in switches)
ARM_DESCRIPTIONS: dict[str, str] = {
    "outcome-only": "outcome reward only, reward model frozen, static environment (GRPO)",
    "policy": "outcome + step-wise reward, reward model frozen, static environment",
    "reward": "+ reward-model training (consistency feedback)",
    "full": "+ environment adaptation (the full method)",
    "stepwise-only": "step-wise reward only, reward model trained, static environment",
    "reward-balanced": "reward, with the judge's rows weighted so won and lost episodes weigh the same "
    "(reward.rm_outcome_balance, ours)",
    "full-balanced": "full, with the judge's rows weighted so won and lost episodes weigh the same "
    "(reward.rm_outcome_balance, ours)",
    "oracle-stepwise": "PRIVILEGED diagnostic: outcome + step-wise reward with the engine's optimal actions as "
    "the votes (no judge), static environment — the step-wise channel's upper bound",
    **{
        arm: f"PRIVILEGED diagnostic: oracle-stepwise with each step's votes turned over with probability "
        f"{int(arm.removeprefix('oracle-p')) / 100:g} (votes' balanced accuracy "
        f"{1 - int(arm.removeprefix('oracle-p')) / 100:g})"
        for arm in ARMS
        if arm.startswith("oracle-p")
    },
    "oracle-good80": "PRIVILEGED diagnostic: oracle-stepwise with a good step's votes turned bad with probability "
    "0.8 (a judge that calls most steps bad; votes' balanced accuracy 0.6)",
}
DEFAULT_ARMS: tuple[str, ...] = ("outcome-only", "policy", "reward", "full")
