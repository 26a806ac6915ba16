"""The RLAnything training loop as Prefect flows — read it next to the paper's algorithm box.

One iteration is one RL step (spec §1):

    rollout  → judge (text games) | write_tests + execute (coding)
             → label (integrated + consistency rewards; accept/reject last step's pending tasks)
             → adapt (critic feedback → harder/easier variants, pending for the next step)
             → train_policy → train_reward → evaluate (every k iterations and after the last)

Iteration 0 seeds the task registry, bootstraps the models and evaluates the warm-started policy.
After each iteration, checkpoints outside ``storage.keep_last`` are deleted (off by default;
docs/operations.md#checkpoint-retention).

Ablation switches (paper Table 1 rows, Fig. 1): ``reward.use_outcome`` / ``reward.use_stepwise``
(in the label stage), ``training.reward.enabled=false`` (frozen reward model) and
``adaptation.enabled=false`` (static environment). ``judge.source=oracle`` is a diagnostic, not an ablation
of the paper: no judge stage runs and the label stage takes each step's votes from the engine's optimal
actions (privileged information), the upper bound of the step-wise reward.
"""

from __future__ import annotations

from dataclasses import dataclass

from rla_core.config import JudgeSource, Setting
from rla_core.settings.base import eval_due, yardstick_due
from rla_core.stage_inputs import StageName
from rla_core.store import ArtifactStore
from tasks.adapt import adapt
from tasks.bootstrap import bootstrap
from tasks.evaluate import evaluate
from tasks.execute import execute
from tasks.judge import judge
from tasks.judge_eval import judge_eval
from tasks.label import label
from tasks.retention import prune_checkpoints
from tasks.rollout import rollout
from tasks.seed_tasks import seed_tasks
from tasks.stage import PlannedStage, RunContext, StageRef, planning, prefect_flow
from tasks.train_policy import train_policy
from tasks.train_reward import train_reward
from tasks.write_tests import write_tests


@dataclass(frozen=True)
class LoopState:
    """What one iteration hands to the next: the current checkpoints and the task registry."""

    policy: StageRef  # stage whose 'policy' checkpoint is current
    reward_model: StageRef  # stage whose 'reward' checkpoint is current
    tasks: StageRef  # stage whose 'tasks' frame is the current registry
    models: StageRef  # the bootstrap stage (frozen environment model, when one is configured)


def unit_test_writer(setting: Setting, reward_model: StageRef) -> dict[str, StageRef]:
    """The evaluate stage's reward-model input: coding evaluates the reward model's unit tests too."""
    return {"reward_model": reward_model} if setting is Setting.CODING else {}


@prefect_flow(name="rlanything-iteration", flow_run_name="{run.run_id}-iter{iteration}")
def iteration_flow(run: RunContext, iteration: int, state: LoopState) -> LoopState:
    """One RL step of RLAnything (spec §1)."""
    cfg = run.config
    # 1. Policy rollouts on sampled active tasks plus last step's pending variants.
    rollouts = rollout(run, iteration, tasks=state.tasks, policy=state.policy)
    # 2. Reward-model signals: written unit tests run in the sandbox (coding) or step judgments.
    if cfg.setting is Setting.CODING:
        unit_tests = write_tests(
            run, iteration, rollouts=rollouts, tasks=state.tasks, reward_model=state.reward_model
        )
        executions = execute(run, iteration, rollouts=rollouts, unit_tests=unit_tests, tasks=state.tasks)
        signals = {"unit_tests": unit_tests, "executions": executions}
    elif cfg.judge.source is JudgeSource.REWARD_MODEL:  # text games, GUI
        signals = {"judgments": judge(run, iteration, rollouts=rollouts, reward_model=state.reward_model)}
    else:  # the oracle diagnostic: the label stage takes its votes from the engine's optimal actions
        signals = {}
    # 3. Labels: integrated policy rewards, reward-model consistency rewards, pending-task decisions.
    labels = label(run, iteration, rollouts=rollouts, tasks=state.tasks, **signals)
    # 4. Environment adaptation: rewrite too-easy / too-hard tasks (skipped for a static environment).
    tasks = (
        adapt(run, iteration, rollouts=rollouts, tasks=labels, models=state.models, **signals)
        if cfg.adaptation.enabled
        else labels
    )
    # 5. Train the policy, then the reward model (unless frozen); image rows read the rollouts' screens.
    screens = {"screens": rollouts} if cfg.models.images.any else {}
    policy = train_policy(run, iteration, samples=labels, policy=state.policy, **screens)
    reward_model = (
        train_reward(run, iteration, samples=labels, reward_model=state.reward_model, **screens)
        if cfg.training.reward.enabled
        else state.reward_model
    )
    # 6. Held-out evaluation of the new policy (every evaluation.every iterations and after the last);
    #    coding: with the new reward model's unit tests (code accuracy, UT accuracy, detection); the judge
    #    on its fixed yardstick, when one is configured.
    if eval_due(cfg, iteration):
        evaluate_models(run, iteration, policy=policy, reward_model=reward_model)
    return LoopState(policy=policy, reward_model=reward_model, tasks=tasks, models=state.models)


def evaluate_models(run: RunContext, iteration: int, *, policy: StageRef, reward_model: StageRef) -> None:
    """An evaluation point: at the run's start and end the judge on its yardstick (``evaluation.judge_steps``,
    when a judge runs), then the policy on the held-out tasks (coding: with the reward model's unit tests)."""
    cfg = run.config
    if yardstick_due(cfg, iteration):
        judge_eval(run, iteration, reward_model=reward_model)
    evaluate(run, iteration, policy=policy, **unit_test_writer(cfg.setting, reward_model))


@prefect_flow(name="rlanything", flow_run_name="{run.run_id}")
def training_loop(run: RunContext) -> LoopState:
    """Seed the task registry, bootstrap and warm-start the models, evaluate them ("Before"), then iterate."""
    tasks = seed_tasks(run, 0)
    models = bootstrap(run, 0)
    # Iteration 0's evaluation is the warm-started policy: the baseline every learning curve starts from.
    evaluate_models(run, 0, policy=models, reward_model=models)
    state = LoopState(policy=models, reward_model=models, tasks=tasks, models=models)
    for iteration in range(1, run.config.iterations + 1):
        state = iteration_flow(run, iteration, state)
        # Retention: once an iteration has committed, delete the checkpoints storage.keep_last no longer keeps.
        prune_checkpoints(run, iteration)
    return state


# ---- the plan: the flow above, run in plan-only mode -----------------------------------------------


def plan(run: RunContext, *, check: bool = True, store: ArtifactStore | None = None) -> list[PlannedStage]:
    """Every stage call the training loop makes for ``run``, in order, without running any.

    With ``check`` each stage says whether its attempt in use is current (a resume would skip it);
    without, the plan is the pipeline's order and wiring only (no store access). ``store``: where the
    manifests are read (default: the run's own artifact root). ``rla status``, the fast
    resume check, ``--from-stage`` and the study read the pipeline from here.
    """
    with planning(check=check, store=store) as stages:
        training_loop.fn(run)
    return stages


def stage_order(run: RunContext) -> dict[int, tuple[StageName, ...]]:
    """Iteration → the stages the loop runs in it, in order (from :func:`plan`, no store access)."""
    order: dict[int, list[StageName]] = {}
    for planned in plan(run, check=False):
        order.setdefault(planned.iteration, []).append(planned.stage)
    return {it: tuple(names) for it, names in order.items()}


def iteration_stages(order: dict[int, tuple[StageName, ...]]) -> tuple[StageName, ...]:
    """Every stage an iteration ≥ 1 runs, once, in flow order, merged over the iterations of
    :func:`stage_order` (an iteration without evaluation still lists the stages before it)."""
    return tuple(dict.fromkeys(name for it, names in sorted(order.items()) if it > 0 for name in names))


def pipeline_order(run: RunContext) -> tuple[StageName, ...]:
    """Every stage name once, in flow order: setup stages, then an iteration's stages (any iteration ≥ 1).

    Example (text games): seed_tasks, bootstrap, rollout, judge, label, adapt, train_policy,
    train_reward, evaluate.
    """
    order = stage_order(run)
    later = iteration_stages(order)
    return (*(name for name in order.get(0, ()) if name not in later), *later)
