"""Model bootstrap and warm start for a run: tiny local models (or given checkpoints) + SFT on expert data.

Used by the bootstrap stage and by ``benchmarks/bench_warmstart_*.py``. Tiny models are cached by
content hash (``models.cache_dir``); hub ids and local checkpoints are used as given (no warm start
unless ``models.warm_start`` is set, since real models need none).
"""

from __future__ import annotations

import functools
import json
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from rla_core.config import hash_jsonable
from rla_core.errors import ConfigError
from rla_core.settings import adapter_of
from rla_core.settings.base import file_digest
from rla_core.stage_inputs import BootstrapInputs
from rla_core.store import publish_dir


@dataclass(frozen=True)
class WarmStartResult:
    policy_dir: Path
    reward_dir: Path
    metrics: dict[str, float]
    environment_dir: Path | None = None


def warm_start_models(cfg: BootstrapInputs, *, out_dir: Path, seed: int) -> WarmStartResult:
    """Resolve the policy and reward model, then SFT each on its demonstrations into ``out_dir``.

    ``seed`` (the bootstrap stage's) is replaced by ``models.warm_start_seed`` when that is set, so runs
    that differ only in their seed can share one warm start (``rla study``). The judge trains for
    ``models.reward_warm_start_epochs`` (default: ``warm_start_epochs``) on its demonstrations with
    ``models.reward_label_noise`` of the labels flipped (:func:`flip_judge_labels`).

    Writes ``out_dir/policy`` and ``out_dir/reward`` (Hugging Face checkpoints). The environment model,
    when configured, is never trained in the loop (spec §1): it is resolved as is, except that a tiny one
    whose setting demonstrates rewrites (``WarmStartData.environment_rows``, OSWorld) is warm-started on
    them into ``out_dir/environment`` like the other two, for
    ``models.environment_warm_start_epochs`` (default: ``warm_start_epochs``). Metrics are namespaced ``policy/warm_start_*``,
    ``reward_model/warm_start_*`` and ``environment/warm_start_*``.
    """

    if cfg.models.warm_start_seed is not None:
        seed = cfg.models.warm_start_seed
    with tempfile.TemporaryDirectory(prefix="rla-demos-") as demo_files:  # the demonstrations' screenshots
        return _warm_start(cfg, out_dir=out_dir, seed=seed, demo_files=Path(demo_files))


def _warm_start(cfg: BootstrapInputs, *, out_dir: Path, seed: int, demo_files: Path) -> WarmStartResult:
    from rla_core.models.bootstrap import is_tiny_ref, resolve_model, tiny_arch
    from rla_core.models.sft import sft

    data = adapter_of(cfg).warm_start(cfg, seed=seed, workdir=demo_files)
    reward_rows = data.reward_rows
    if cfg.models.reward_label_noise > 0:  # a step judge's rows (the config refuses it for coding)
        reward_rows = flip_judge_labels(reward_rows, share=cfg.models.reward_label_noise, seed=seed)
    cache = Path(cfg.models.cache_dir)
    packing = cfg.training.sft_max_tokens_per_micro_batch
    metrics: dict[str, float] = {}
    dirs: dict[str, Path] = {}
    roles = [
        ("policy", cfg.models.policy, data.policy_rows, "policy"),
        ("reward", cfg.models.reward, reward_rows, "reward_model"),
    ]
    env_ref = cfg.models.environment
    if env_ref is not None and is_tiny_ref(env_ref) and data.environment_rows is not None:
        roles.append(("environment", env_ref, data.environment_rows, "environment"))
    sizes = cfg.models.tiny
    for role, ref, rows, prefix in roles:
        arch = tiny_arch(getattr(sizes, role))
        base = resolve_model(ref, corpus=data.corpus, cache_dir=cache, arch=arch)
        base_id = base.name  # tiny models and cache entries are named by content hash
        if role == "policy" and cfg.models.warm_start and cfg.models.policy_reading_drills > 0:
            base, reading = _read_first(cfg, base, data.policy_rows, seed=seed)
            base_id = base.parent.name
            metrics |= {f"policy/reading_{k}": float(v) for k, v in reading.items()}
        epochs = cfg.models.warm_start_epochs if cfg.models.warm_start else 0
        if role == "reward" and cfg.models.warm_start and cfg.models.reward_warm_start_epochs is not None:
            epochs = cfg.models.reward_warm_start_epochs
        if (
            role == "environment"
            and cfg.models.warm_start
            and cfg.models.environment_warm_start_epochs is not None
        ):
            epochs = cfg.models.environment_warm_start_epochs
        rows = format_image_rows(base, rows, chat=cfg.models.serving.chat_template)
        train = functools.partial(
            sft,
            base,
            rows,
            epochs=epochs,
            lr=cfg.training.sft_lr,
            seed=seed,
            max_tokens_per_micro_batch=packing,
        )
        if is_tiny_ref(ref):
            # Tiny models are named by content hash, so (model, demos, schedule, packing, seed) identifies the
            # result (packing changes float rounding only, but a cache entry must equal a fresh run).
            key = hash_jsonable(
                [base_id, _rows_digest(rows), epochs, cfg.training.sft_lr, packing, seed, cfg.threads]
            )
            stats = _cached_sft(cache / "warm" / f"{role}-{key[:16]}", out_dir / role, train)
        else:
            stats = train(out_dir=out_dir / role)
        metrics |= {f"{prefix}/warm_start_{k}": float(v) for k, v in stats.items()}
        dirs[role] = out_dir / role
    env_dir = dirs.get("environment") or (
        resolve_model(env_ref, corpus=data.corpus, cache_dir=cache, arch=tiny_arch(sizes.environment))
        if env_ref is not None
        else None
    )
    return WarmStartResult(
        policy_dir=dirs["policy"], reward_dir=dirs["reward"], metrics=metrics, environment_dir=env_dir
    )


def format_image_rows(model_dir: Path, rows: pl.DataFrame, *, chat: bool) -> pl.DataFrame:
    """Warm-start rows with images given their image slots (and chat markup with ``chat``), exactly as the
    generator formats the prompts it will see (``Generator.format_prompt``); text rows unchanged. A
    text-only ``model_dir`` with image rows is a :class:`~rla_core.errors.ModelError`."""
    from rla_core.models.multimodal import ImagePrompt, VisionProcessor

    if "images" not in rows.columns or rows["images"].null_count() == rows.height:
        return rows
    vision = VisionProcessor.from_pretrained(
        model_dir, what="warm-start rows with screenshots (models.images)"
    )
    prompts = [
        vision.format(ImagePrompt(p, tuple(imgs)), chat=chat).text if imgs else p
        for p, imgs in zip(rows["prompt"].to_list(), rows["images"].to_list(), strict=True)
    ]
    return rows.with_columns(pl.Series("prompt", prompts, dtype=pl.String))


def _rows_digest(rows: pl.DataFrame) -> list[Any]:
    """What identifies warm-start rows: their text, and their images by content (the files live in a
    temporary directory, so their paths differ every time)."""
    if "images" not in rows.columns:
        return rows.hash_rows().to_list()
    images = [[file_digest(ref) for ref in refs] if refs else None for refs in rows["images"].to_list()]
    return [rows.drop("images").hash_rows().to_list(), images]


# The reading drills' recipe (docs/bench-design.md §8): batches of 16, prompt tokens at weight 0.25.
READING_BATCH_SIZE = 16
READING_PROMPT_WEIGHT = 0.25


def _read_first(
    cfg: BootstrapInputs, base: Path, demo_rows: pl.DataFrame, *, seed: int
) -> tuple[Path, dict[str, float]]:
    """Train the tiny policy ``base`` on ``models.policy_reading_drills`` reading drills (one pass).

    The drills are built from the demonstrations' prompts (:func:`rla_core.envs.demos.reading_drills`);
    the result is cached like a warm start and returned as the base of the demonstration SFT (the config
    allows them for a tiny text-game policy only).
    """
    from rla_core.envs.demos import reading_drills
    from rla_core.models.sft import sft

    prompts = sorted(set(demo_rows["prompt"].to_list()))
    drills = reading_drills(prompts, n=cfg.models.policy_reading_drills, seed=seed)
    lr = cfg.models.policy_reading_lr
    recipe = [READING_BATCH_SIZE, READING_PROMPT_WEIGHT, "cosine"]
    packing = cfg.training.sft_max_tokens_per_micro_batch
    key = hash_jsonable([base.name, drills.hash_rows().to_list(), lr, recipe, packing, seed, cfg.threads])
    entry = Path(cfg.models.cache_dir) / "warm" / f"policy-reading-{key[:16]}"
    train = functools.partial(
        sft,
        base,
        drills,
        epochs=1,
        lr=lr,
        seed=seed,
        batch_size=READING_BATCH_SIZE,
        prompt_weight=READING_PROMPT_WEIGHT,
        cosine=True,
        max_tokens_per_micro_batch=packing,
    )
    return entry / "model", _ensure_cached(entry, train)


_VERDICT = re.compile(r"(does not move|moves) the task forward\. \\boxed\{(-1|1)\}$")


def flip_judge_labels(rows: pl.DataFrame, *, share: float, seed: int) -> pl.DataFrame:
    """Judge demonstrations with ``round(share · N)`` labels flipped (good ↔ bad), chosen with ``seed``.

    A weak judge for benchmarks: SFT on these rows gives a judge whose votes agree with the engine's
    optimal actions less often. Reads and writes columns prompt, response; a response that is not a
    warm-start verdict (``judge_demo_response``) raises ConfigError.

    Example: share 0.5 on 4 rows flips 2 of them: "The action x moves the task forward. \\boxed{1}"
    becomes "The action x does not move the task forward. \\boxed{-1}".
    """
    responses = rows["response"].to_list()
    flip = set(random.Random(seed).sample(range(len(responses)), round(share * len(responses))))
    out = []
    for i, text in enumerate(responses):
        match = _VERDICT.search(text)
        if match is None:
            raise ConfigError(
                f"judge demonstration {i} is not a step verdict, cannot flip it: {text[-80:]!r}"
            )
        if i in flip:
            good = match.group(2) == "1"
            verdict = (
                "does not move the task forward. \\boxed{-1}"
                if good
                else "moves the task forward. \\boxed{1}"
            )
            text = text[: match.start()] + verdict
        out.append(text)
    return rows.with_columns(pl.Series("response", out, dtype=pl.String))


def _cached_sft(entry: Path, out: Path, train: Callable[..., dict[str, float]]) -> dict[str, float]:
    """Run ``train`` into a cache entry once (:func:`_ensure_cached`), then copy its model to ``out``."""
    stats = _ensure_cached(entry, train)
    shutil.copytree(entry / "model", out)
    return stats


def _ensure_cached(entry: Path, train: Callable[..., dict[str, float]]) -> dict[str, float]:
    """Run ``train(out_dir=…)`` once to fill ``entry/model`` (a temp dir renamed into place, so a killed run
    leaves no half entry); return its metrics, stored in ``entry/metrics.json``."""
    if not (entry / "metrics.json").is_file():

        def write(tmp: Path) -> None:
            stats = train(out_dir=tmp / "model")
            (tmp / "metrics.json").write_text(json.dumps(stats))

        # A concurrent writer's finished entry (it holds metrics.json) is kept.
        publish_dir(entry, write, marker="metrics.json")
    stats_cached: dict[str, float] = json.loads((entry / "metrics.json").read_text())
    return stats_cached
