"""The generative step judge: m reward-model judgments per rollout step, and its accuracy metrics.

Spec §1.2(b): every step of every rollout is judged m times; the judge sees the agent's prompt, its
response and the next observation (prompt in spec §5) and reasons before a ``\\boxed{}`` score. Scores
are parsed with the tolerant rule of :func:`rla_core.algo.parsing.parse_boxed_score`; an unparsable
output is stored as a null score with its ``parse_error`` (docs/architecture.md#the-design-contract: never a fabricated 0 — the 0 of
spec §2.1 is applied where rewards are computed).

Seeds: step ``(task_id, rollout_id, step)`` is judged with ``derive_seed(seed, "judge", task_id,
rollout_id, step)`` (judgment k = sample k of that seed), so a step's judgments never depend on the
other steps judged with it. ``GenerationMode.JOINT`` (default) sends all judge prompts in ONE generate
call (``n=m``, per-prompt ``seeds``); ``PER_EPISODE`` makes one call per step — the same judgments.

Example:
    >>> j = judge_steps(rollouts, generator=gen, m=3, sampling=SamplingConfig(), seed=1, iteration=1)  # doctest: +SKIP
    >>> judge_step_accuracy(rollouts, j)  # doctest: +SKIP
    0.75
"""

from __future__ import annotations

import json
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core import progress
from rla_core.algo.episodes import played
from rla_core.algo.parsing import parse_boxed_score
from rla_core.envs.prompts import render_judge_prompt
from rla_core.envs.rollout import GenerationMode, derive_seed
from rla_core.errors import ArtifactError
from rla_core.models.multimodal import ImagePrompt, Prompt, strip_image_slots
from rla_core.schemas import get_schema, validate

if TYPE_CHECKING:
    from rla_core.config import SamplingConfig
    from rla_core.models.generator import Generation, Generator

_STEP_KEY = ["task_id", "rollout_id", "step"]


def judge_steps(
    rollouts: pl.DataFrame,
    *,
    generator: Generator,
    m: int,
    sampling: SamplingConfig,
    seed: int,
    iteration: int,
    mode: GenerationMode = GenerationMode.JOINT,
    template: str | Template = "judge",
    strict: bool = False,
    screens: Path | None = None,
) -> pl.DataFrame:
    """Judge every rollout step ``m`` times; return the 'judgments' artifact (spec §1.2(b), §5).

    ``template`` names the judge prompt (``judge`` for text games, ``gui_judge`` for GUI steps);
    ``strict`` selects the OSWorld parsing rule (boxed content must be ``[+-]?1``) over AlfWorld's
    tolerant one. ``screens`` (``models.images.reward``): the directory the rollouts' screenshot
    references resolve against; each judge prompt then shows the step's screen and the screen after it
    (spec §1.3), recorded in ``images`` as the rollouts' references. The agent's prompt is shown as text,
    without its own image slots.

    Judgments of a step depend only on that step and the seed (module docstring), not on the batch.

    Reads 'rollouts' columns task_id, rollout_id, step, prompt, response, next_observation. Writes
    iteration, task_id, rollout_id, step, judge_idx (0..m-1), prompt (the judge prompt, through
    ``generator.format_prompt``: chat markup when ``models.serving.chat_template`` is on), response,
    score (+1 / -1, null when unparsable) and parse_error (null when parsed).
    """
    if m < 1:
        raise ValueError(f"m={m}: at least one judgment per step is needed")
    rollouts = validate("rollouts", rollouts, where="judge_steps input")
    columns = [
        *_STEP_KEY,
        "prompt",
        "response",
        "next_observation",
        "observation_ref",
        "next_observation_ref",
    ]
    steps = rollouts.select(columns).to_dicts()
    if not steps:
        return validate("judgments", pl.DataFrame(schema=get_schema("judgments").polars_schema))
    # In the judge model's chat markup when configured: the recorded prompt is what the judge saw.
    prompts = [generator.format_prompt(_judge_prompt(s, template=template, screens=screens)) for s in steps]
    seeds = [derive_seed(seed, "judge", s["task_id"], s["rollout_id"], s["step"]) for s in steps]
    outputs: list[list[Generation]] = []
    with progress.track("", total=len(prompts), unit="steps", rate="judgments") as counter:
        if mode is GenerationMode.JOINT:
            outputs = generator.generate(prompts, n=m, sampling=sampling, seed=seeds[0], seeds=seeds)
            counter.advance(len(prompts), judgments=len(prompts) * m)
        else:
            for one_prompt, one_seed in zip(prompts, seeds, strict=True):
                (samples,) = generator.generate(
                    [one_prompt], n=m, sampling=sampling, seed=one_seed, seeds=[one_seed]
                )
                outputs.append(samples)
                counter.advance(1, judgments=m)
    rows: list[dict[str, Any]] = []
    for s, prompt, samples in zip(steps, prompts, outputs, strict=True):
        for judge_idx, gen in enumerate(samples):
            parsed = parse_boxed_score(gen.text, strict=strict)
            rows.append(
                {
                    "iteration": iteration,
                    "task_id": s["task_id"],
                    "rollout_id": s["rollout_id"],
                    "step": s["step"],
                    "judge_idx": judge_idx,
                    "prompt": prompt.text if isinstance(prompt, ImagePrompt) else prompt,
                    "images": [s["observation_ref"], s["next_observation_ref"]] if screens else None,
                    "response": gen.text,
                    "score": float(parsed.value) if parsed.valid and parsed.value is not None else None,
                    "parse_error": None if parsed.valid else parsed.reason,
                }
            )
    frame = pl.DataFrame(rows, schema=get_schema("judgments").polars_schema)
    return validate("judgments", frame, where="judge_steps")


def _judge_prompt(step: dict[str, Any], *, template: str | Template, screens: Path | None) -> Prompt:
    text = render_judge_prompt(
        prompt=strip_image_slots(step["prompt"]),
        response=step["response"],
        next_observation=step["next_observation"],
        template=template,
    )
    if screens is None:
        return text
    refs = (step["observation_ref"], step["next_observation_ref"])
    if None in refs:
        raise ArtifactError(
            f"models.images.reward=true shows the judge the screens before and after each step, but step "
            f"{step['step']} of task {step['task_id']} (rollout {step['rollout_id']}) has observation_ref="
            f"{refs[0]!r}, next_observation_ref={refs[1]!r}: rollouts need gui.screenshots=true (a run "
            "recorded before next_observation_ref existed must redo its rollouts)"
        )
    return ImagePrompt(text, tuple(str(screens / ref) for ref in refs))


def optimal_steps(rollouts: pl.DataFrame) -> pl.Series:
    """Per 'rollouts' row: the played ``action`` is one of its ``expert_actions`` (the engine's optimal
    next commands, a JSON list; null counts as none) — the ground truth of a good step."""
    return pl.Series(
        "good",
        [
            action in json.loads(expert or "[]")
            for action, expert in zip(
                rollouts["action"].to_list(), rollouts["expert_actions"].to_list(), strict=True
            )
        ],
        dtype=pl.Boolean,
    )


def step_votes(rollouts: pl.DataFrame, judgments: pl.DataFrame) -> pl.DataFrame:
    """Per step: the judge's mean vote (null scores count 0, spec §2.1) and whether the step was good.

    Reads 'rollouts' task_id, rollout_id, step, action, expert_actions, outcome and 'judgments'
    task_id, rollout_id, step, score. Returns task_id, rollout_id, step, outcome, good (action is one
    of the engine's optimal next commands), mean_vote, all_negative (every judgment is -1).
    Steps without judgments are left out.
    """
    steps = rollouts.select([*_STEP_KEY, "outcome"]).with_columns(good=optimal_steps(rollouts))
    votes = judgments.group_by(_STEP_KEY).agg(
        mean_vote=pl.col("score").fill_null(0.0).mean(),
        all_negative=(pl.col("score") == -1.0).fill_null(False).all(),
    )
    return steps.join(votes, on=_STEP_KEY, how="inner").sort(_STEP_KEY)


def judge_step_accuracy(rollouts: pl.DataFrame, judgments: pl.DataFrame) -> float | None:
    """Share of judged steps whose mean-vote sign matches expert goodness (spec §7 "Process Acc").

    A step is good iff its action is in its ``expert_actions`` (TextWorld ``policy_commands``). A
    mean vote > 0 predicts good, < 0 predicts bad, and exactly 0 counts as wrong (no signal). None
    when nothing was judged. Example: votes [+1, -1/3, 0] on steps [good, bad, good] → 2/3.

    On games that are almost always lost most steps are bad, so a judge that calls every step bad
    scores the bad steps' share here: read it beside :func:`judge_step_metrics`' balanced accuracy.
    """
    return judge_step_metrics(rollouts, judgments).get("reward_model/step_accuracy")


def judge_step_metrics(rollouts: pl.DataFrame, judgments: pl.DataFrame) -> dict[str, float]:
    """The judge's step-level metrics against the engine's labels (:func:`optimal_steps`), as stage metrics.

    * ``reward_model/step_accuracy`` — raw accuracy (:func:`judge_step_accuracy`);
    * ``reward_model/step_balanced_accuracy`` — the mean of the recall on good steps (mean vote > 0) and
      the recall on bad steps (mean vote < 0); a mean vote of exactly 0 is a miss in either class. A
      constant judge scores 0.5 (one recall 1, the other 0), whatever the classes' shares; absent when
      either class has no judged step (a recall of an empty class is undefined);
    * ``reward_model/good_verdict_share`` — share of judged steps the judge calls good (mean vote > 0);
    * ``reward_model/good_step_share`` — share of judged steps that are good (the engine's label): the raw
      accuracy of a judge that calls every step bad is one minus this.

    Empty when nothing was judged.

    Example: votes [+1, -1, -1, 0] on steps [good, bad, good, bad] → raw 2/4; recall good 1/2, bad 1/2 →
    balanced 0.5; good verdicts 1/4; good steps 2/4.
    """
    votes = step_votes(rollouts, judgments)
    if votes.height == 0:
        return {}
    # mean vote > 0 predicts good, < 0 bad; exactly 0 predicts neither (a miss in either class)
    v = votes.with_columns(pred_good=pl.col("mean_vote") > 0, pred_bad=pl.col("mean_vote") < 0)
    good, bad = v.filter(pl.col("good")), v.filter(~pl.col("good"))
    hits_good, hits_bad = int(good["pred_good"].sum()), int(bad["pred_bad"].sum())
    metrics = {
        "reward_model/step_accuracy": (hits_good + hits_bad) / v.height,
        "reward_model/good_verdict_share": int(v["pred_good"].sum()) / v.height,
        "reward_model/good_step_share": good.height / v.height,
    }
    if good.height and bad.height:
        metrics["reward_model/step_balanced_accuracy"] = (hits_good / good.height + hits_bad / bad.height) / 2
    return metrics


def oracle_judgments(rollouts: pl.DataFrame, *, m: int) -> pl.DataFrame:
    """The 'judgments' an oracle judge would write: every one of a step's ``m`` votes is +1 when the played
    action is one of the engine's optimal next actions (:func:`optimal_steps`) and -1 otherwise.

    A diagnostic (``judge.source=oracle``): it reads privileged information the reward model never sees, so
    the policy's step-wise reward is ±1 per step in place of the mean of m sampled votes — the upper bound
    of what the step-wise channel can carry. Rows have the 'judgments' schema; ``prompt`` and ``response``
    are empty (no model was asked) and ``parse_error`` is null. Episodes whose environment failed are
    left out, as the judge stage leaves them out.

    Example: a step whose action is in its expert_actions gets m scores of +1.0.
    """
    steps = played(rollouts).filter(pl.col("step").is_not_null())
    score = pl.when(optimal_steps(steps)).then(1.0).otherwise(-1.0)
    frame = (
        steps.select("iteration", *_STEP_KEY, score=score)
        .join(pl.DataFrame({"judge_idx": list(range(m))}, schema={"judge_idx": pl.Int64}), how="cross")
        .sort([*_STEP_KEY, "judge_idx"])
    )
    columns = get_schema("judgments").columns
    filled = frame.with_columns(
        pl.lit("").alias("prompt"),
        pl.lit("").alias("response"),
        *(
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in columns.items()
            if name in ("images", "parse_error")
        ),
    )
    return validate("judgments", filled.select(list(columns)), where="oracle_judgments")


def judge_outcome_agreement(rollouts: pl.DataFrame, judgments: pl.DataFrame) -> float | None:
    """Share of rollouts whose outcome the judge foresees (spec §7 "Outcome Acc").

    The prediction is the sign of the mean, over the rollout's steps, of the step mean votes; 0 counts
    as wrong. None when nothing was judged. Example: rollouts with step means [+1, +1/3] (outcome +1)
    and [-1] (outcome +1) → 1/2.
    """
    votes = step_votes(rollouts, judgments)
    if votes.height == 0:
        return None
    per_rollout = votes.group_by(["task_id", "rollout_id"]).agg(
        pred=pl.col("mean_vote").mean(), outcome=pl.col("outcome").first()
    )
    agree = ((pl.col("pred") > 0) & (pl.col("outcome") > 0)) | (
        (pl.col("pred") < 0) & (pl.col("outcome") < 0)
    )
    return float(per_rollout.select(agree.mean()).item())
