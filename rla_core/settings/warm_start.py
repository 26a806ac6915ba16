"""Model bootstrap and warm start for a run: tiny local models (or given checkpoints) + SFT on expert data.

Used by the bootstrap stage and by ``benchmarks/bench_warmstart_*.py``. Tiny models are cached by
content hash (``models.cache_dir``); hub ids and local checkpoints are used as given (no warm start
unless ``models.warm_start`` is set, since real models need none).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rla_core.config import RunConfig, hash_jsonable
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
        if ref.startswith("tiny:"):
            # Tiny models are named by content hash, so (model, demos, schedule, seed) identifies the result.
            key = hash_jsonable(
                [base.name, rows.hash_rows().to_list(), epochs, cfg.training.sft_lr, seed, cfg.threads]
            )
            stats = _cached_sft(
                cache / "warm" / f"{role}-{key[:16]}",
                out_dir / role,
                functools.partial(sft, base, rows, epochs=epochs, lr=cfg.training.sft_lr, seed=seed),
            )
        else:
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


def _cached_sft(entry: Path, out: Path, train: Callable[..., dict[str, float]]) -> dict[str, float]:
    """Run ``train`` into a cache entry once (temp dir + rename, so a killed run leaves no half entry)."""
    if not (entry / "metrics.json").is_file():
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{entry.name}-", dir=entry.parent))
        try:
            stats = train(out_dir=tmp / "model")
            (tmp / "metrics.json").write_text(json.dumps(stats))
            try:
                os.rename(tmp, entry)
            except OSError:
                if not (entry / "metrics.json").is_file():  # not a concurrent writer's finished entry
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(entry / "model", out)
    stats_cached: dict[str, float] = json.loads((entry / "metrics.json").read_text())
    return stats_cached
