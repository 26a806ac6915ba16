"""Warm-start data for tiny models: policy and judge demonstrations, and the tokenizer corpus.

* Policy demos: the walkthrough of each task, each step's prompt rendered exactly as the rollout
  runner renders it, response = a short reason + ``\\boxed{i}`` (i = the walkthrough action's index).
* Judge demos: steps of expert (walkthrough) and random-action trajectories, judge prompt as in
  :mod:`rla_core.envs.judge`, labelled from TextWorld's ``policy_commands`` (good → ``\\boxed{1}``,
  otherwise ``\\boxed{-1}``), the same ground truth as the judge's step accuracy.
* :func:`corpus_texts`: templates, prompts and responses, for the tiny tokenizer's BPE.

Every episode is played by :func:`play_demo`, which replays one whose environment failed (a browser or
desktop died, a plug-in raised) up to ``retries`` times (``rollout.env_retries``, as a rollout's) with the
same choices, and then fails the warm start with a :class:`~rla_core.errors.DemonstrationError` whose
message names the environment and the task.

Example:
    >>> demos = policy_demos(env, [spec])  # doctest: +SKIP
    >>> demos.columns
    ['prompt', 'images', 'response']
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from string import Template
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import polars as pl

from rla_core.algo.seeds import derive_seed
from rla_core.envs.prompts import (
    SHARED_TEMPLATES,
    judge_demo_response,
    listed_actions,
    policy_demo_response,
    render_judge_prompt,
    replace_action_list,
    template_texts,
    turn_prompt,
)
from rla_core.errors import DemonstrationError, EnvironmentFault, EnvironmentSpecError
from rla_core.schemas import Images, Str

if TYPE_CHECKING:
    from rla_core.envs.base import Environment, Episode
    from rla_core.stage_inputs import BootstrapInputs

# How a demonstration picks its action at each step: (step, admissible actions, episode) -> action, or None to stop.
Choose: TypeAlias = "Callable[[int, list[str], Episode], str | None]"

# Warm-start rows: a prompt, the screens it shows (null: text only; references to image files) and the answer.
DEMO_COLUMNS: dict[str, pl.DataType] = {"prompt": Str, "images": Images, "response": Str}


class DemoStep(NamedTuple):
    """One demonstrated step: the policy prompt, the demo response, the next observation, whether the
    action was one of the engine's optimal ones, the action, the screens before each step of the episode
    so far (this step's last; None where the environment keeps none) and the screen after this step."""

    prompt: str
    response: str
    next_observation: str
    good: bool
    action: str
    screens: tuple[str | None, ...]
    next_screen: str | None


def _shown(refs: Sequence[str | None], what: str) -> list[str]:
    if None in refs:
        raise EnvironmentSpecError(
            f"{what} shows screenshots, but the environment kept none for a demonstration step: image "
            "demonstrations need a GUI environment opened with a screenshot directory"
        )
    return [r for r in refs if r is not None]


def policy_row(step: DemoStep, *, images: int = 0) -> dict[str, Any]:
    """A policy warm-start row; ``images`` > 0: with the step's last ``images`` screens, as rollouts show."""
    shown = _shown(step.screens[-images:], f"models.images.policy={images}") if images else None
    return {"prompt": step.prompt, "images": shown, "response": step.response}


def judge_row(step: DemoStep, *, template: str | Template, screens: bool = False) -> dict[str, Any]:
    """A judge warm-start row labelled by whether the action was optimal; ``screens``: with the step's
    screen and the one after it, as the judge sees them (``models.images.reward``)."""
    prompt = render_judge_prompt(
        prompt=step.prompt, response=step.response, next_observation=step.next_observation, template=template
    )
    shown = _shown([step.screens[-1], step.next_screen], "models.images.reward") if screens else None
    return {"prompt": prompt, "images": shown, "response": judge_demo_response(step.action, good=step.good)}


def play_demo(
    env: Environment,
    spec: dict[str, Any],
    *,
    chooser: Callable[[], Choose],
    max_steps: int,
    history_turns: int,
    retries: int = 0,
) -> list[DemoStep]:
    """Play one episode; per step its :class:`DemoStep`.

    ``chooser()`` makes the episode's ``choose(step, actions, episode)``, which returns the action to play,
    or None to stop; it is made again for a replay, so a replay makes the same choices. An episode whose
    environment failed (:class:`~rla_core.errors.EnvironmentFault`) is replayed up to ``retries`` times;
    then :class:`~rla_core.errors.DemonstrationError` names the environment, the task and the last fault.
    """
    fault: EnvironmentFault | None = None
    for _attempt in range(retries + 1):
        try:
            return _play_once(env, spec, choose=chooser(), max_steps=max_steps, history_turns=history_turns)
        except EnvironmentFault as failed:
            fault = failed
    assert fault is not None
    raise DemonstrationError(
        f"{env.name}: the warm start could not play an episode of a seed task ({retries + 1} tries, "
        f"rollout.env_retries={retries}): {fault.kind}: {fault.message}. Fix the environment (or the task) and "
        "run `rla resume` (docs/environment-errors.md)"
    ) from fault


def _play_once(
    env: Environment, spec: dict[str, Any], *, choose: Choose, max_steps: int, history_turns: int
) -> list[DemoStep]:
    episode = env.open(spec, seed=0)
    steps: list[DemoStep] = []
    history: list[tuple[str, str]] = []
    screens: list[str | None] = []
    free_form, won = False, False
    try:
        for step in range(max_steps):
            actions = list(episode.admissible_actions)
            free_form = episode.free_form
            action = choose(step, actions, episode)
            if action is None or not (actions or free_form):
                break
            prompt = turn_prompt(episode, history, history_turns=history_turns)
            good = action in episode.expert_actions()  # none on a free-form turn: labelled by outcome below
            # A free-form answer is the text itself; an action not listed is played but not demonstrated.
            response = (
                action
                if free_form
                else policy_demo_response(action, actions.index(action))
                if action in actions
                else None
            )
            before = episode.observation
            screens.append(episode.observation_ref)
            result = episode.step(action)
            if response is not None:
                steps.append(
                    DemoStep(
                        prompt,
                        response,
                        result.observation,
                        good,
                        action,
                        tuple(screens),
                        episode.observation_ref,
                    )
                )
            history.append((before, action))
            if result.done:
                won = result.won
                break
    finally:
        episode.close()
    if free_form:  # free text has no expert labels: a won episode's turns are good, a lost one's bad
        return [s._replace(good=won) for s in steps]
    return steps


def following(plan: list[str]) -> Callable[[], Choose]:
    """The chooser of a demonstration that plays ``plan`` (an expert's walkthrough)."""

    def choose(step: int, actions: list[str], _ep: Episode) -> str | None:
        return plan[step] if step < len(plan) else None

    return lambda: choose


def policy_demos(
    env: Environment,
    specs: Sequence[dict[str, Any]],
    *,
    history_turns: int = 2,
    images: int = 0,
    retries: int = 0,
) -> pl.DataFrame:
    """Policy SFT rows (prompt, images, response) from each task's walkthrough (warm start, docs/architecture.md#cross-module-interfaces
    Trainer); ``images``: screens per prompt, as :func:`policy_row`; ``retries``: as :func:`play_demo`'s."""
    rows: list[dict[str, Any]] = []
    for spec in specs:
        for walkthrough in env.demonstrations(spec, seed=0):
            plan = list(walkthrough)
            for step in play_demo(
                env, spec, chooser=following(plan), max_steps=len(plan), history_turns=history_turns,
                retries=retries,
            ):  # fmt: skip
                rows.append(policy_row(step, images=images))
    return pl.DataFrame(rows, schema=DEMO_COLUMNS)


def noisy_policy_demos(
    env: Environment,
    specs: Sequence[dict[str, Any]],
    *,
    noise: float,
    episodes: int,
    max_steps: int,
    seed: int = 0,
    history_turns: int = 2,
    images: int = 0,
    retries: int = 0,
) -> pl.DataFrame:
    """Policy SFT rows from a noisy expert (warm start of a weak but well-formed policy, for benchmarks).

    Each task is played ``episodes`` times (cut at ``max_steps`` or the end of the game). At every step
    the demonstrator plays, with probability ``noise``, a uniformly random admissible action, and
    otherwise one of the engine's optimal next commands from the current state (seeded by
    ``derive_seed(seed, spec, "policy-demo", i)``). Every row pairs an action name with its index, so the
    policy learns the answer format from all of them; only about ``1 - noise`` of them show a good choice.

    Example:
        >>> noisy_policy_demos(env, [spec], noise=0.5, episodes=4, max_steps=6).columns  # doctest: +SKIP
        ['prompt', 'images', 'response']
    """
    if not 0.0 <= noise <= 1.0 or episodes < 1 or max_steps < 1:
        raise ValueError(
            f"noise={noise} must lie in [0, 1], episodes={episodes} and max_steps={max_steps} >= 1"
        )
    rows: list[dict[str, Any]] = []
    for spec in specs:
        for i in range(episodes):
            episode_seed = derive_seed(seed, sorted(spec.items()), "policy-demo", i)

            def chooser(episode_seed: int = episode_seed) -> Choose:
                rng = random.Random(episode_seed)  # a replay draws the same choices

                def choose(step: int, actions: list[str], ep: Episode) -> str | None:
                    if not actions:
                        return None
                    good = [a for a in ep.expert_actions() if a in actions]
                    return rng.choice(actions) if rng.random() < noise or not good else rng.choice(good)

                return choose

            for step in play_demo(
                env, spec, chooser=chooser, max_steps=max_steps, history_turns=history_turns, retries=retries
            ):
                rows.append(policy_row(step, images=images))
    return pl.DataFrame(rows, schema=DEMO_COLUMNS)


def policy_warm_start_rows(
    cfg: BootstrapInputs, env: Environment, specs: Sequence[dict[str, Any]], *, seed: int
) -> pl.DataFrame:
    """The policy's warm-start rows as configured: the walkthroughs (:func:`policy_demos`), or with
    ``models.policy_demo_noise > 0`` noisy-expert episodes (:func:`noisy_policy_demos`)."""
    turns = cfg.models.history_turns  # demos show the history the rollouts will show
    retries = cfg.rollout.env_retries  # a demonstration whose environment failed is replayed
    if cfg.models.policy_demo_noise > 0:
        return noisy_policy_demos(
            env,
            specs,
            noise=cfg.models.policy_demo_noise,
            episodes=cfg.models.policy_demo_episodes,
            max_steps=cfg.rollout.max_steps,
            seed=seed,
            history_turns=turns,
            images=cfg.models.images.policy,
            retries=retries,
        )
    return policy_demos(env, specs, history_turns=turns, images=cfg.models.images.policy, retries=retries)


# Reading drills (:func:`reading_drills`): made-up object names from these syllables, in these commands.
DRILL_SYLLABLES = (
    "ba", "ko", "ri", "tum", "sel", "vor", "an", "pli", "dra", "mo", "ne", "zu",
    "gar", "fi", "lo", "te", "quin", "ush", "pe", "rak", "sim", "ol", "bet", "cha",
)  # fmt: skip
DRILL_COMMANDS = (
    "examine {o}", "take {o}", "drop {o}", "eat {o}", "open {o}", "close {o}", "put {o} on {p}",
    "insert {o} into {p}", "take {o} from {p}", "unlock {o} with {p}",
)  # fmt: skip
# Shares of drills that keep the prompt's list, keep a random subset of it (renumbered), or invent one.
DRILL_MIX: dict[str, float] = {"same": 0.3, "subset": 0.3, "made-up": 0.4}


def reading_drills(prompts: Sequence[str], *, n: int, seed: int) -> pl.DataFrame:
    """``n`` reading drills: policy prompts whose answer is a uniformly random *listed* action.

    Teaches a tiny policy trained from scratch to read its prompt before RL: to write an action that is
    in the numbered list and to box that action's number (docs/bench-design.md §8). Each drill takes a
    prompt of ``prompts`` (rendered policy prompts, e.g. noisy-expert demonstrations) and, per
    :data:`DRILL_MIX`, keeps its action list, keeps a random subset of it (each action with probability
    0.6, renumbered), or replaces it by 5–13 commands over 2–4 made-up objects (so the list cannot be
    memorised). The response is ``policy_demo_response(action, index)`` for a uniformly random listed
    action. Deterministic in ``seed``.

    Example: a drill of ``Actions:\n0: look\n1: take key`` with the subset rule keeping only
    ``take key`` answers ``I should take key. \\boxed{0}``.
    """
    if n < 0 or (n and not prompts):
        raise ValueError(f"reading_drills needs n >= 0 (got {n}) and at least one prompt when n > 0")
    rng = random.Random(seed)
    kinds, weights = list(DRILL_MIX), list(DRILL_MIX.values())
    rows: list[dict[str, Any]] = []
    for _ in range(n):
        prompt = rng.choice(prompts)
        listed = listed_actions(prompt)
        kind = rng.choices(kinds, weights)[0]
        if kind == "subset":
            listed = [a for a in listed if rng.random() < 0.6] or listed
        elif kind == "made-up":
            listed = _made_up_actions(rng)
        k = rng.randrange(len(listed))
        rows.append(
            {
                "prompt": replace_action_list(prompt, listed),
                "images": None,
                "response": policy_demo_response(listed[k], k),
            }
        )
    return pl.DataFrame(rows, schema=DEMO_COLUMNS)


def _made_up_actions(rng: random.Random) -> list[str]:
    def word() -> str:
        return "".join(rng.choice(DRILL_SYLLABLES) for _ in range(rng.randint(1, 3)))

    objects = [" ".join(word() for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(2, 4))]
    listed = {"look", "inventory", f"go {rng.choice(['north', 'south', 'east', 'west'])}"}
    size = rng.randint(5, 13)
    while len(listed) < size:
        listed.add(rng.choice(DRILL_COMMANDS).format(o=rng.choice(objects), p=rng.choice(objects)))
    return sorted(listed)


def judge_demos(
    env: Environment,
    specs: Sequence[dict[str, Any]],
    *,
    random_rollouts: int = 2,
    max_steps: int = 4,
    seed: int = 0,
    history_turns: int = 2,
    judge_template: str | Template = "judge",
    screens: bool = False,
    retries: int = 0,
    free_form: bool = False,
) -> pl.DataFrame:
    """Judge SFT rows (prompt, images, response) from expert and random trajectories, labelled by
    policy_commands; ``retries``: as :func:`play_demo`'s.

    ``free_form``: the environment's turns are free text, which has neither random admissible actions nor
    expert labels: each task contributes its demonstration (won: its turns good) and the next task's
    demonstration (in ``specs`` order, cyclically) played on it, its turns labelled by that episode's outcome.

    ``judge_template`` is the judge prompt the rows are rendered with (``gui_judge`` for GUI tasks);
    ``screens``: each row shows the step's screen and the one after it (:func:`judge_row`).

    Each task contributes its walkthrough steps (good) and ``random_rollouts`` trajectories of
    uniformly random admissible actions (seeded by ``derive_seed(seed, spec, i)``), each step labelled
    good iff its action was one of the engine's optimal next commands.

    Random trajectories stop after ``max_steps`` (default 4): their later steps are nearly all bad and
    each costs a long judge prompt in SFT, so 4 keeps the labels more balanced and the warm start
    within its time budget (``benchmarks/bench_warmstart_textgame.py``: judge step accuracy > 0.5).
    """
    rows: list[dict[str, Any]] = []
    if free_form:
        plans_of = [env.demonstrations(spec, seed=0) for spec in specs]
        for i, spec in enumerate(specs):
            for plan in [*plans_of[i], *plans_of[(i + 1) % len(specs)]] if len(specs) > 1 else plans_of[i]:
                steps = play_demo(
                    env, spec, chooser=following(list(plan)), max_steps=len(plan), history_turns=history_turns,
                    retries=retries,
                )  # fmt: skip
                rows.extend(judge_row(step, template=judge_template, screens=screens) for step in steps)
        return pl.DataFrame(rows, schema=DEMO_COLUMNS)
    for spec in specs:
        plans = env.demonstrations(spec, seed=0)
        trajectories = []
        for plan in plans:
            trajectories.append(
                play_demo(
                    env, spec, chooser=following(plan), max_steps=len(plan), history_turns=history_turns,
                    retries=retries,
                )
            )  # fmt: skip
        for i in range(random_rollouts):
            trajectories.append(
                play_demo(
                    env, spec, chooser=random_chooser(derive_seed(seed, sorted(spec.items()), i)),
                    max_steps=max_steps, history_turns=history_turns, retries=retries,
                )
            )  # fmt: skip
        for trajectory in trajectories:
            rows.extend(judge_row(step, template=judge_template, screens=screens) for step in trajectory)
    return pl.DataFrame(rows, schema=DEMO_COLUMNS)


def random_chooser(seed: int) -> Callable[[], Choose]:
    """The chooser of a random trajectory: uniformly random admissible actions drawn from ``seed`` (a replay
    draws the same ones)."""

    def chooser() -> Choose:
        rng = random.Random(seed)

        def pick(step: int, actions: list[str], _ep: Episode) -> str | None:
            return rng.choice(actions) if actions else None

        return pick

    return chooser


def corpus_texts(
    env: Environment,
    specs: Sequence[dict[str, Any]],
    *,
    history_turns: int = 2,
    seed: int = 0,
    retries: int = 0,
) -> list[str]:
    """Texts for the tiny tokenizer's BPE: the shared templates, and the demo prompts and responses."""
    texts = list(template_texts(SHARED_TEMPLATES).values())
    for frame in (
        policy_demos(env, specs, history_turns=history_turns, retries=retries),
        judge_demos(env, specs, seed=seed, history_turns=history_turns, retries=retries),
    ):
        texts.extend(frame["prompt"].to_list())
        texts.extend(frame["response"].to_list())
    return texts
