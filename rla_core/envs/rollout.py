"""The batched rollout runner: the policy plays n episodes of every task, all concurrently (spec §1.2(a)).

All episodes advance in lock-step. Each turn, the prompts of every live episode are rendered and sent
to the generator, the action index is parsed from the last ``\\boxed{}`` (spec §5), an invalid answer
is recorded (``action_valid=False`` plus the reason) and replaced by the spec's fallback (index 0,
clamped), and every episode steps its own game. An episode ends at the win, at a loss, or after
``max_steps`` actions; successful trajectories are therefore cut at the winning step. The outcome
(+1 won / -1 otherwise) and the status (won / lost) are written on every row of the rollout.

When our machinery fails inside an episode (the environment raises
:class:`~rla_core.errors.EnvironmentFault`: a desktop, X server or browser died, a page or desktop offers
no admissible action because it broke) the episode ends with status ``env_error``, a null outcome, the
error kind and a one-line message; the other episodes go on. :func:`play_rollouts` replays such episodes
on a fresh environment with the same seeds, up to ``request.env_retries`` times, and keeps the failed
attempts in the 'env_errors' frame (docs/environment-errors.md). Any other exception is a bug of ours
and fails the stage. :func:`rla_core.dispatch.play_episodes` is the one caller of :func:`play_rollouts`
in the loop (in :func:`waves` when the environment holds few episodes at once).

Seeds: episode ``(task_id, rollout_id)`` samples turn ``step`` with
``derive_seed(seed, task_id, rollout_id, step)``, passed per prompt as ``generate(..., seeds=...)``;
a backend samples each prompt from its own seeded stream (see :mod:`rla_core.models.generator`), so
a row does not depend on which other episodes were live with it. How prompts reach the generator is
a :class:`GenerationMode`:

* ``JOINT`` (default): ONE generate call per turn for all live episodes (one padded batch).
* ``PER_EPISODE``: one generate call per live episode per turn, with the same seeds — the same rows,
  ~4x slower on CPU; kept as the plain reference that the joint mode is tested against.

Either way the batched runner's rows equal playing each episode alone (``rollout_ids=[i]``) with the
same seed (docs/architecture.md#determinism-scope).

Example:
    >>> request = RolloutRequest(tasks=(PlayTask("t0", "s0", False, spec),), n=4, max_steps=8,
    ...                          sampling=SamplingConfig(), seed=1, iteration=1, history_turns=2,
    ...                          env_retries=1)
    >>> frame = run_rollouts(request, env=env, generator=gen)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core import progress
from rla_core.algo.curriculum import PlayTask
from rla_core.algo.episodes import EPISODE_KEYS, EpisodeStatus, is_env_error
from rla_core.algo.parsing import Parsed, fallback_action_index, parse_action_index
from rla_core.algo.seeds import derive_seed
from rla_core.config import InvalidAction
from rla_core.envs.base import EnvErrorKind, StepResult
from rla_core.envs.prompts import turn_prompt
from rla_core.errors import EnvironmentFault, EnvironmentSpecError
from rla_core.models.multimodal import ImagePrompt, Prompt
from rla_core.schemas import empty_frame, get_schema, validate

if TYPE_CHECKING:
    from rla_core.config import SamplingConfig
    from rla_core.envs.base import Environment, Episode
    from rla_core.models.generator import Generation, Generator
    from rla_core.stage_inputs import RolloutRequest


class GenerationMode(StrEnum):
    """How the runner batches the policy's prompts (see the module docstring)."""

    PER_EPISODE = "per_episode"
    JOINT = "joint"


@dataclass
class RolloutTimings:
    """Wall seconds spent in generation vs. the game engine during one :func:`run_rollouts` call."""

    generation_s: float = 0.0
    engine_s: float = 0.0
    steps: int = 0


@dataclass
class _Live:
    task: PlayTask
    rollout_id: int
    episode: Episode | None  # None: the environment failed to open it
    history: list[tuple[str, str]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    fault: EnvironmentFault | None = None

    @property
    def game(self) -> Episode:
        assert self.episode is not None  # only live (opened) episodes are played
        return self.episode


def run_rollouts(
    request: RolloutRequest,
    *,
    env: Environment,
    generator: Generator,
    mode: GenerationMode = GenerationMode.JOINT,
    timings: RolloutTimings | None = None,
    rollout_ids: Sequence[int] | None = None,
) -> pl.DataFrame:
    """Play ``request.n`` rollouts of every task concurrently; return the 'rollouts' artifact (spec §1.2(a)).

    Writes every 'rollouts' column: iteration, task_id, slot_id, pending, rollout_id (0..n-1), step
    (0-based), prompt, response, action (the command played), action_valid, invalid_reason (null when
    valid), next_observation, expert_actions (JSON list of the engine's optimal next commands before
    the action), done (True on the last row of a rollout), outcome (+1 won / -1, on every row), score
    (an environment plug-in's raw score once the episode ended; null for engines without one
    and for a cut episode), prompt_tokens, response_tokens. The prompt shows the last
    ``request.history_turns`` turns (``models.history_turns``) and is passed through
    ``generator.format_prompt`` (chat markup when ``models.serving.chat_template`` is on). Rows are
    ordered by task order, rollout_id, step. ``timings``, when given, accumulates generation vs. engine
    time. ``rollout_ids`` plays only those rollouts of each task (default ``range(n)``), e.g. to replay
    one; ``request.episodes`` (a shard, :mod:`rla_core.cluster.shards`) plays only those episodes. ``request.invalid_action``: ``FALLBACK`` plays the spec's fallback action for an invalid answer;
    ``FAIL`` ends the episode there as a failure (the row's ``action`` is empty and the game is not
    stepped). ``env`` is the environment already opened for ``request.env``.
    """
    n, max_steps, seed, iteration = request.n, request.max_steps, request.seed, request.iteration
    sampling, history_turns, invalid_action = request.sampling, request.history_turns, request.invalid_action
    images = request.images
    if n < 1 or max_steps < 1:
        raise ValueError(f"n={n} and max_steps={max_steps} must both be at least 1")
    timer = timings if timings is not None else RolloutTimings()
    parsed_tasks = [PlayTask(*t) for t in request.tasks]
    for task in parsed_tasks:
        env.validate_spec(task.spec)
    live: list[_Live] = []
    finished: list[_Live] = []
    started = time.perf_counter()
    by_id = {task.task_id: task for task in parsed_tasks}
    if rollout_ids is not None:
        episodes = [(task.task_id, rollout_id) for task in parsed_tasks for rollout_id in rollout_ids]
    else:
        episodes = request.episode_keys()  # a shard's episodes (rla_core.cluster), else every one
    for task_id, rollout_id in episodes:
        task = by_id[task_id]
        try:
            live.append(
                _Live(
                    task, rollout_id, env.open(task.spec, seed=episode_seed(seed, task.task_id, rollout_id))
                )
            )
        except EnvironmentFault as fault:  # e.g. no browser tab could be opened
            failed = _Live(task=task, rollout_id=rollout_id, episode=None)
            _env_error(failed, fault, iteration=iteration)
            finished.append(failed)
    timer.engine_s += time.perf_counter() - started
    try:
        with progress.track("", total=len(live), unit="episodes", rate="steps") as counter:
            for step in range(max_steps):
                # In the model's chat markup when configured: the recorded prompt is what the model saw.
                # Reading the observation may find the environment dead (a desktop whose set-up failed).
                prompts: list[Prompt] = []
                for ep in list(live):
                    try:
                        prompt = _policy_prompt(ep, history_turns=history_turns, images=images)
                    except EnvironmentFault as fault:
                        _env_error(ep, fault, iteration=iteration)
                        live.remove(ep)
                        finished.append(ep)
                        counter.advance(1, steps=0, tokens=0)
                        continue
                    prompts.append(generator.format_prompt(prompt))
                if not live:
                    break
                seeds = [derive_seed(seed, ep.task.task_id, ep.rollout_id, step) for ep in live]
                started = time.perf_counter()
                outputs = _generate(generator, prompts, seeds, sampling=sampling, mode=mode)
                timer.generation_s += time.perf_counter() - started
                started = time.perf_counter()
                still: list[_Live] = []
                for ep, prompt, out in zip(live, prompts, outputs, strict=True):
                    _play_turn(
                        ep, step=step, prompt=prompt, out=out, max_steps=max_steps, iteration=iteration,
                        invalid_action=invalid_action,
                    )  # fmt: skip
                    (still if not ep.rows[-1]["done"] else finished).append(ep)
                timer.engine_s += time.perf_counter() - started
                timer.steps += len(live)
                tokens = sum(out.completion_tokens for out in outputs)
                counter.advance(len(live) - len(still), steps=len(live), tokens=tokens)
                live = still
    finally:
        for ep in live + finished:
            if ep.episode is not None:
                ep.episode.close()
    order = {t.task_id: i for i, t in enumerate(parsed_tasks)}
    done_eps = sorted(finished, key=lambda e: (order[e.task.task_id], e.rollout_id))
    rows = [row for ep in done_eps for row in ep.rows]
    return validate(
        "rollouts", pl.DataFrame(rows, schema=get_schema("rollouts").polars_schema), where="run_rollouts"
    )


def episode_seed(seed: int, task_id: str, rollout_id: int) -> int:
    """The seed episode ``(task_id, rollout_id)`` of a request seeded ``seed`` is opened (or played) with."""
    return derive_seed(seed, task_id, rollout_id)


def play_rollouts(
    request: RolloutRequest, *, env: Environment, generator: Generator
) -> dict[str, pl.DataFrame]:
    """:func:`run_rollouts` of ``request`` on ``env``, then its ``env_error`` episodes replayed up to
    ``request.env_retries`` times.

    Each replay plays only the failed episodes (``request.episodes``), with the same seeds, on ``env``
    (a fresh browser tab or desktop: the failed one was killed or reset); its rows replace the failed ones
    and carry ``attempt`` = the replay's number. Returns the frames ``rollouts`` (every episode once,
    canonical order, the last attempt's rows) and, when an attempt failed, ``env_errors`` (one row per
    failed attempt, the final ones included).

    Example: episode ("t", 1) fails once and wins on its replay → ``rollouts`` holds its replay's rows
    (status won, attempt 1) and ``env_errors`` one row (attempt 0).
    """

    def play(part: RolloutRequest) -> pl.DataFrame:
        return run_rollouts(part, env=env, generator=generator)

    return replay_failed(request, play)


def replay_failed(
    request: RolloutRequest, play: Callable[[RolloutRequest], pl.DataFrame]
) -> dict[str, pl.DataFrame]:
    """``play(request)``, then its ``env_error`` episodes replayed by ``play`` up to ``request.env_retries``
    times (:func:`play_rollouts`' rule, for every way of playing a request's episodes)."""
    frame = play(request)
    failures = [_attempts(frame)]
    for attempt in range(1, request.env_retries + 1):
        failed = _failed_keys(frame)
        if not failed:
            break
        replay = play(replace(request, episodes=tuple(failed))).with_columns(
            attempt=pl.lit(attempt, dtype=pl.Int64)
        )
        failures.append(_attempts(replay))
        kept = frame.join(
            pl.DataFrame(failed, schema=_KEY_SCHEMA, orient="row"), on=list(EPISODE_KEYS), how="anti"
        )
        frame = _canonical(pl.concat([kept, replay], how="vertical"), request)
    frames = {"rollouts": validate("rollouts", frame, where="play_rollouts")}
    errors = pl.concat(failures, how="vertical")
    if errors.height:
        frames["env_errors"] = validate("env_errors", errors, where="play_rollouts")
    return frames


_KEY_SCHEMA = {"task_id": pl.String, "rollout_id": pl.Int64}


def waves(keys: Sequence[tuple[str, int]], size: int) -> Iterator[tuple[tuple[str, int], ...]]:
    """Consecutive chunks of at most ``size`` episode keys (canonical order kept): an environment that holds
    at most ``size`` open episodes (``Environment.max_open``: one desktop per episode) plays a wave at a time.

    Example:
        >>> [len(w) for w in waves([("t", i) for i in range(5)], 2)]
        [2, 2, 1]
    """
    for start in range(0, len(keys), max(1, size)):
        yield tuple(keys[start : start + size])


def _failed_keys(frame: pl.DataFrame) -> list[tuple[str, int]]:
    failed = frame.filter(is_env_error(frame)).select(EPISODE_KEYS).unique(maintain_order=True)
    return [(str(t), int(r)) for t, r in failed.iter_rows()]


def _attempts(frame: pl.DataFrame) -> pl.DataFrame:
    """'env_errors' rows of the failed episodes of one attempt (``frame``: that attempt's rollouts)."""
    failed = frame.filter(is_env_error(frame))
    if not failed.height:
        return empty_frame("env_errors")
    return (
        failed.group_by(EPISODE_KEYS, maintain_order=True)
        .agg(
            iteration=pl.col("iteration").first(),
            attempt=pl.col("attempt").first().fill_null(0),
            steps=pl.col("step").count().cast(pl.Int64),
            error_kind=pl.col("error_kind").first(),
            error_message=pl.col("error_message").first(),
        )
        .select(list(get_schema("env_errors").columns))
    )


def _canonical(frame: pl.DataFrame, request: RolloutRequest) -> pl.DataFrame:
    """Rows in the request's canonical episode order (task order, rollout id), then by step."""
    keys = request.episode_keys()
    order = pl.DataFrame(
        {"task_id": [k[0] for k in keys], "rollout_id": [k[1] for k in keys], "_order": range(len(keys))},
        schema={**_KEY_SCHEMA, "_order": pl.Int64},
    )
    return (
        frame.join(order, on=list(EPISODE_KEYS), how="left")
        .sort("_order", "step", nulls_last=False)
        .drop("_order")
    )


def _policy_prompt(ep: _Live, *, history_turns: int, images: int) -> Prompt:
    """The policy's prompt for the episode's next step: text, plus its last ``images`` screens when > 0.
    A free-form turn shows the episode's conversation as the plug-in gives it (every turn)."""
    text = turn_prompt(ep.game, ep.history, history_turns=history_turns)
    if images == 0:
        return text
    current = ep.game.observation_ref
    if current is None:
        raise EnvironmentSpecError(
            f"models.images.policy={images} shows the policy its screen, but task {ep.task.task_id} "
            f"(rollout {ep.rollout_id}, step {len(ep.rows)}) has no screenshot: this environment keeps "
            "none (only the gui setting does, with gui.screenshots=true)"
        )
    earlier = [row["observation_ref"] for row in ep.rows[-(images - 1) :]] if images > 1 else []
    return ImagePrompt(text, (*earlier, current))


def _generate(
    generator: Generator,
    prompts: list[Prompt],
    seeds: list[int],
    *,
    sampling: SamplingConfig,
    mode: GenerationMode,
) -> list[Generation]:
    # ``seed`` is required by the Protocol but unused once ``seeds`` is given; pass the first for clarity.
    if mode is GenerationMode.JOINT:
        outputs = generator.generate(prompts, n=1, sampling=sampling, seed=seeds[0], seeds=seeds)
        return [samples[0] for samples in outputs]
    return [
        generator.generate([prompt], n=1, sampling=sampling, seed=s, seeds=[s])[0][0]
        for prompt, s in zip(prompts, seeds, strict=True)
    ]


# The next observation recorded when an invalid answer ends an episode (InvalidAction.FAIL).
INVALID_ANSWER_ENDS = "Invalid answer (no valid action index in \\boxed{}): the episode ends."


def _play_turn(
    ep: _Live,
    *,
    step: int,
    prompt: Prompt,
    out: Generation,
    max_steps: int,
    iteration: int,
    invalid_action: InvalidAction,
) -> None:
    row: dict[str, Any] = {
        "iteration": iteration,
        "task_id": ep.task.task_id,
        "slot_id": ep.task.slot_id,
        "pending": ep.task.pending,
        "rollout_id": ep.rollout_id,
        "step": step,
        "prompt": prompt.text if isinstance(prompt, ImagePrompt) else prompt,
        "images": list(prompt.images) if isinstance(prompt, ImagePrompt) else None,
        "response": out.text,
        "action": "",
        "action_valid": False,
        "invalid_reason": None,
        "next_observation": "",
        "expert_actions": json.dumps([]),
        "observation_ref": None,
        "next_observation_ref": None,
        "done": False,
        "outcome": None,
        "score": None,
        "prompt_tokens": out.prompt_tokens,
        "response_tokens": out.completion_tokens,
        "status": None,
        "error_kind": None,
        "error_message": None,
        "attempt": 0,
    }
    try:
        result = _step(ep, row, out=out, invalid_action=invalid_action)
    except EnvironmentFault as fault:  # our machinery failed during this step: the row records the attempt
        ep.rows.append(row)
        _env_error(ep, fault, iteration=iteration)
        return
    done = result.done or step + 1 >= max_steps
    row["done"] = done
    ep.history.append((row["_observation_before"], row["action"]))
    del row["_observation_before"]
    ep.rows.append(row)
    if done:
        outcome, status = (1.0, EpisodeStatus.WON) if result.won else (-1.0, EpisodeStatus.LOST)
        for r in ep.rows:
            r["outcome"], r["status"], r["score"] = outcome, status.value, result.score


def _step(ep: _Live, row: dict[str, Any], *, out: Generation, invalid_action: InvalidAction) -> StepResult:
    """Parse the answer, play it, and fill ``row``; raises EnvironmentFault when the environment fails.
    On a free-form turn the policy's text is played as it was written (parsing it, and scoring a malformed
    or empty answer, is the plug-in's); free text has no expert labels."""
    episode = ep.game
    actions = list(episode.admissible_actions)
    if not actions and not episode.free_form:
        # Every engine offers at least one action on a working page or desktop (MiniWoB: its elements;
        # OSWorld: DONE and FAIL; text games: their commands): none means it broke (lost its elements).
        raise EnvironmentFault(
            EnvErrorKind.NO_ACTIONS,
            "the environment offered no admissible action (the page or desktop broke)",
        )
    row["expert_actions"] = json.dumps(episode.expert_actions())
    row["_observation_before"] = episode.observation
    ref_before = episode.observation_ref
    row["observation_ref"] = row["next_observation_ref"] = ref_before
    if episode.free_form:
        row["action"], row["action_valid"], play = out.text, True, True
    else:
        parsed: Parsed[int] = parse_action_index(out.text, len(actions))
        row["action_valid"], row["invalid_reason"] = parsed.valid, None if parsed.valid else parsed.reason
        play = parsed.valid or invalid_action is InvalidAction.FALLBACK
        if play:
            row["action"] = actions[fallback_action_index(parsed, len(actions))]
    if play:
        result = episode.step(row["action"])
        # The screen after the step (GUI): the environment's latest screenshot once an action was played;
        # the screen before it when none was (nothing changed). A judge that sees images gets both (spec §1.3).
        row["next_observation_ref"] = episode.observation_ref
    else:
        result = StepResult(observation=INVALID_ANSWER_ENDS, done=True, won=False)
    row["next_observation"] = result.observation
    return result


def _env_error(ep: _Live, fault: EnvironmentFault, *, iteration: int) -> None:
    """End ``ep`` as ``env_error`` (:func:`end_as_env_error` of its rows)."""
    ep.fault = fault
    keys = {
        "iteration": iteration, "task_id": ep.task.task_id, "slot_id": ep.task.slot_id, "pending": ep.task.pending,
        "rollout_id": ep.rollout_id, "attempt": 0,
    }  # fmt: skip
    end_as_env_error(ep.rows, keys, fault)


def end_as_env_error(rows: list[dict[str, Any]], keys: dict[str, Any], fault: EnvironmentFault) -> None:
    """End an episode's 'rollouts' ``rows`` as ``env_error``, in place: every row gets a null outcome, the
    kind and the message; an episode that failed before its first action gets one row with a null step and
    the episode's ``keys`` (it must still be counted); the last row is ``done`` and, when the failure left it
    no next observation, says so there."""
    if not rows:
        rows.append({**dict.fromkeys(get_schema("rollouts").columns), **keys})
    last = rows[-1]
    last.pop("_observation_before", None)
    last["done"] = True
    if last.get("step") is not None and not last.get("next_observation"):
        last["next_observation"] = f"The environment failed ({fault.kind}): {fault.message}"
    for r in rows:
        r.update(
            outcome=None,
            status=EpisodeStatus.ENV_ERROR.value,
            error_kind=fault.kind,
            error_message=fault.message,
        )
