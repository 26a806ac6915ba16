"""Model bootstrap and warm start for a run: tiny local models (or given checkpoints) + SFT on expert data.

Used by the bootstrap stage and by ``benchmarks/bench_warmstart_*.py``. Tiny models are cached by
content hash (``models.cache_dir``); hub ids and local checkpoints are used as given (no warm start
unless ``models.warm_start`` is set, since real models need none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rla_core.config import RunConfig
from rla_core.settings import adapter_for


@dataclass(frozen=True)
class WarmStartResult:
    policy_dir: Path
    reward_dir: Path
    metrics: dict[str, float]
    environment_dir: Path | None = None


def warm_start_models(cfg: RunConfig, *, out_dir: Path, seed: int) -> WarmStartResult:
    """Resolve the policy and reward model, then SFT each on its demonstrations into ``out_dir``.

    Writes ``out_dir/policy`` and ``out_dir/reward`` (Hugging Face checkpoints); the environment model,
    when configured, is resolved as is (it is never trained, spec §1). Metrics are
    namespaced ``policy/warm_start_*`` and ``reward_model/warm_start_*``.
    """
    from rla_core.models.bootstrap import resolve_model
    from rla_core.models.trainer import sft

    data = adapter_for(cfg.setting).warm_start(cfg, seed=seed)
    cache = Path(cfg.models.cache_dir)
    metrics: dict[str, float] = {}
    dirs: dict[str, Path] = {}
    for role, ref, rows, prefix in (
        ("policy", cfg.models.policy, data.policy_rows, "policy"),
        ("reward", cfg.models.reward, data.reward_rows, "reward_model"),
    ):
        base = resolve_model(ref, corpus=data.corpus, cache_dir=cache)
        epochs = cfg.models.warm_start_epochs if cfg.models.warm_start else 0
        stats = sft(base, rows, out_dir=out_dir / role, epochs=epochs, lr=cfg.training.sft_lr, seed=seed)
        metrics |= {f"{prefix}/warm_start_{k}": float(v) for k, v in stats.items()}
        dirs[role] = out_dir / role
    env_dir = (
        resolve_model(cfg.models.environment, corpus=data.corpus, cache_dir=cache)
        if cfg.models.environment is not None
        else None
    )
    return WarmStartResult(
        policy_dir=dirs["policy"], reward_dir=dirs["reward"], metrics=metrics, environment_dir=env_dir
    )
