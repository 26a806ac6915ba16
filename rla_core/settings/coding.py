"""The coding setting: programs judged by GT tests, a reward model that writes unit tests (spec §1.1, §2.3-2.5, §3.1).

One rollout step is one program. The rollout stage also runs each program on its task's GT tests in
the sandbox, because the outcome (+1 iff all GT tests pass) and score (GT pass ratio) belong to the
rollout; the execute stage runs the programs on the reward model's generated tests.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from rla_core.algo.coding_rewards import (
    coding_metrics,
    coding_policy_samples,
    coding_reward_samples,
    score_programs,
)
from rla_core.algo.curriculum import PlayTask, RewriteTarget
from rla_core.algo.episodes import played
from rla_core.config import ClusterConfig, EvalGrader, ProblemFormat, Setting
from rla_core.errors import EnvironmentSpecError
from rla_core.schemas import empty_frame, get_schema
from rla_core.settings.base import (
    ProposalRequest,
    TaskFiles,
    WarmStartData,
    load_task_file,
    resolve_data_path,
    seed_tasks_loaded,
)
from rla_core.stage_inputs import (
    AdaptInputs,
    BootstrapInputs,
    CodingSandbox,
    CodingUnitTests,
    EvaluateInputs,
    LabelInputs,
    RolloutRequest,
    SeedTasksInputs,
    expect_section,
    need,
)

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from rla_core.coding.tasks import CodingTask, InvalidProblem
    from rla_core.models.generator import Generator
    from rla_core.sandbox.runner import Sandbox


def coding_task(task_id: str, spec: dict[str, Any]) -> CodingTask:
    """The CodingTask of a registry entry, carrying the registry's task id."""
    from rla_core.coding.tasks import CodingTask

    return dataclasses.replace(CodingTask.from_spec(spec, where=task_id), task_id=task_id)


def with_eval_grader(task: CodingTask, grader: EvalGrader) -> CodingTask:
    """``task`` as ``coding.eval_grader`` grades it: as its loader stamped it (native), or by our rules with the
    run's own memory and output limits (rla); its tests, header and prompt stay the benchmark's."""
    from rla_core.algo.graders import Grader

    if grader is EvalGrader.NATIVE:
        return task
    return dataclasses.replace(task, grader=Grader.RLA, memory_limit_mb=None)


def sandbox(section: CodingSandbox, cluster: ClusterConfig | None = None) -> Sandbox:
    """The sandbox of ``section``; with a Ray ``cluster`` its batches of runs fan out over the workers."""
    from rla_core.sandbox.runner import Sandbox

    return Sandbox(max_parallel=section.max_parallel, cluster=cluster)


def _load(path: str | Path, *, what: str) -> list[CodingTask]:
    from rla_core.coding.tasks import load_problems

    p = resolve_data_path(path)
    tasks, invalid = load_problems(p)
    _refuse_malformed(invalid, f"{what} file '{p}'")
    return tasks


def _refuse_malformed(invalid: Sequence[InvalidProblem], where: str) -> None:
    """An EnvironmentSpecError naming how many problems of ``where`` are malformed, and the first one."""
    if invalid:
        first = invalid[0]
        raise EnvironmentSpecError(
            f"{where} has {len(invalid)} malformed problem(s); first: {first.where}: {first.reason}"
        )


def programs_frame(rollouts: pl.DataFrame) -> pl.DataFrame:
    """task_id, rollout_id, code (null when no program could be extracted) from coding rollouts; programs
    whose GT runs' sandbox died (env_error) are left out: nothing is learnt from them."""
    return played(rollouts).select(
        "task_id",
        "rollout_id",
        code=pl.when(pl.col("action_valid")).then(pl.col("action")).otherwise(None),
    )


def _rates_by_test(rates: pl.DataFrame, kind: str) -> dict[int, float]:
    """test_idx → pass rate of one test kind ('gt' or 'generated') from ``coding.rewriter.pass_rates``."""
    mine = rates.filter(pl.col("test_kind") == kind)
    return dict(zip(mine["test_idx"].to_list(), mine["pass_rate"].to_list(), strict=True))


class CodingSetting:
    """Coding problems with stdin/stdout or function tests."""

    judge_template = "judge"
    judge_strict = False
    env_name = "coding"
    setting = Setting.CODING
    task_files = TaskFiles("coding", "problems", "eval_problems")

    def prerequisites(self) -> list[str]:
        """Nothing the preflight checks: the sandbox checks its host when the first stage sets it up."""
        return []

    check_task_file = load_task_file  # the stages' loaders check every task
    check_seed_tasks = seed_tasks_loaded

    def seed_tasks(self, inputs: SeedTasksInputs) -> list[tuple[str, str, dict[str, Any]]]:
        problems = need(inputs.coding, Setting.CODING).problems
        return [(t.task_id, self.env_name, t.spec()) for t in _load(problems, what="training problem")]

    def eval_tasks(self, inputs: EvaluateInputs, path: str | Path | None) -> list[PlayTask]:
        from rla_core.coding.benchmarks import load_benchmark

        section = need(inputs.coding, Setting.CODING)
        p = resolve_data_path(path or section.eval_problems)
        # Ours or a benchmark's layout (docs/coding-benchmarks.md); a malformed row stops the evaluation.
        loaded = load_benchmark(
            p, section.eval_format, time_limit_s=section.benchmark_time_limit_s, limit=section.eval_limit,
            livebench_release=section.livebench_release,
        )  # fmt: skip
        _refuse_malformed(loaded.invalid, f"evaluation problem file '{p}' ({section.eval_format})")
        if section.eval_format is not ProblemFormat.RLA:
            # Problems left out on purpose (outside the LiveBench release, not supported yet) change what the
            # numbers cover: a warning, which the console shows.
            say = log.warning if loaded.left_out else log.info
            say("evaluation problems from '%s' (%s): %s", p, section.eval_format, loaded.summary())
        tasks = [with_eval_grader(t, section.eval_grader) for t in loaded.tasks]
        return [PlayTask(t.task_id, t.task_id, False, t.spec()) for t in tasks]

    def warm_start(self, inputs: BootstrapInputs, *, seed: int, workdir: Path | None = None) -> WarmStartData:
        from rla_core.coding.demos import policy_demo_rows, unit_test_demo_rows
        from rla_core.coding.prompts import TEMPLATES

        del seed  # the demonstrations are the reference solutions: deterministic
        section = need(inputs.coding, Setting.CODING)
        tasks = _load(section.problems, what="training problem")
        policy = policy_demo_rows(tasks)
        reward = unit_test_demo_rows(tasks, sandbox=sandbox(section), tests_per_task=2)
        corpus = [
            *TEMPLATES.values(),
            *policy["prompt"],
            *policy["response"],
            *reward["prompt"],
            *reward["response"],
        ]
        return WarmStartData(corpus=list(corpus), policy_rows=policy, reward_rows=reward)

    def sample_rollouts(self, request: RolloutRequest, *, generator: Generator) -> dict[str, pl.DataFrame]:
        """Every problem's programs in one generate call, then their GT runs in the sandbox."""
        from rla_core.coding.benchmarks import assemble_program
        from rla_core.coding.execute import gt_tests_frame, run_tests
        from rla_core.coding.prompts import task_policy_prompt
        from rla_core.coding.unit_tests import extract_program

        # Coding has one step per rollout (spec §0: T = 1), no action index to be invalid, and no side
        # files: max_steps, invalid_action and workdir do not apply.
        section = expect_section(request.env, CodingSandbox)
        tasks, iteration = request.tasks, request.iteration
        coding = [coding_task(t.task_id, t.spec) for t in tasks]
        # In the model's chat markup when configured: the recorded prompt is what it saw.
        prompts = [generator.format_prompt(task_policy_prompt(c)) for c in coding]
        outputs = generator.generate(prompts, n=request.n, sampling=request.sampling, seed=request.seed)
        rows: list[dict[str, Any]] = []
        for task, code, prompt, samples in zip(tasks, coding, prompts, outputs, strict=True):
            for rollout_id, gen in enumerate(samples):
                program = extract_program(gen.text)
                # A benchmark's harness rules (imports, LiveBench's completion prefix); ours: as written.
                action = (
                    assemble_program(program.value, code)
                    if program.valid and program.value
                    else (program.value or "")
                )
                rows.append(
                    {
                        "iteration": iteration,
                        "task_id": task.task_id,
                        "slot_id": task.slot_id,
                        "pending": task.pending,
                        "rollout_id": rollout_id,
                        "step": 0,
                        "prompt": prompt,
                        "response": gen.text,
                        "action": action,
                        "action_valid": program.valid,
                        "invalid_reason": program.reason,
                        "next_observation": "",
                        "expert_actions": None,
                        "observation_ref": None,
                        "next_observation_ref": None,
                        "done": True,
                        "outcome": None,
                        "score": None,
                        "prompt_tokens": gen.prompt_tokens,
                        "response_tokens": gen.completion_tokens,
                        "status": None,  # score_programs: from the GT runs
                        "error_kind": None,
                        "error_message": None,
                        "attempt": 0,
                    }
                )
        base = pl.DataFrame(rows, schema=get_schema("rollouts").polars_schema)
        executions = run_tests(
            programs_frame(base),
            gt_tests_frame(coding),
            sandbox=sandbox(section, request.cluster),
            iteration=iteration,
            memory_mb=section.memory_limit_mb,
            output_kb=section.output_limit_kb,
            retries=request.env_retries,  # a GT run whose sandbox died runs again in a fresh sandbox
        )
        return {"rollouts": score_programs(base, executions), "executions": executions}

    def write_tests(
        self,
        section: CodingUnitTests,
        tasks: list[CodingTask],
        *,
        generator: Generator,
        seed: int,
        iteration: int,
    ) -> pl.DataFrame:
        """K unit tests per task written by the reward model (spec §1.1 step 2); artifact 'unit_tests'."""
        from rla_core.coding.prompts import unit_test_prompt
        from rla_core.coding.unit_tests import unit_test_rows

        k = section.unit_tests_per_task
        prompts = [  # in the reward model's chat markup when configured (recorded as seen)
            generator.format_prompt(
                unit_test_prompt(t.question, test_method=t.test_method, entry_point=t.entry_point)
            )
            for t in tasks
        ]
        outputs = generator.generate(prompts, n=k, sampling=section.unit_test_sampling, seed=seed)
        frames = [
            unit_test_rows(
                iteration=iteration, task_id=t.task_id, prompts=[p] * k, responses=[g.text for g in gens]
            )
            for t, p, gens in zip(tasks, prompts, outputs, strict=True)
        ]
        return pl.concat(frames) if frames else empty_frame("unit_tests")

    def execute(
        self,
        section: CodingSandbox,
        rollouts: pl.DataFrame,
        unit_tests: pl.DataFrame,
        tasks: list[CodingTask],
        *,
        iteration: int,
        retries: int = 0,
        cluster: ClusterConfig | None = None,
    ) -> pl.DataFrame:
        """Run every program on its task's generated tests (spec §1.1 step 3); artifact 'executions'. A run
        whose sandbox died runs again in a fresh sandbox up to ``retries`` times (``rollout.env_retries``)."""
        from rla_core.coding.execute import generated_tests_frame, run_tests

        return run_tests(
            programs_frame(rollouts),
            generated_tests_frame(unit_tests, tasks),
            sandbox=sandbox(section, cluster),
            iteration=iteration,
            memory_mb=section.memory_limit_mb,
            output_kb=section.output_limit_kb,
            retries=retries,
        )

    def labels(
        self, inputs: LabelInputs, frames: dict[str, pl.DataFrame], *, accepted: set[str], seed: int
    ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, float]]:
        del seed  # coding's labels draw nothing
        rollouts, executions, unit_tests = frames["rollouts"], frames["executions"], frames["unit_tests"]
        policy, p_stats = coding_policy_samples(
            rollouts, executions, cfg=inputs.reward, accepted_pending=accepted
        )
        reward, r_stats = coding_reward_samples(
            rollouts, executions, unit_tests, cfg=inputs.reward, accepted_pending=accepted
        )
        stats = {f"policy/{k}": float(v) for k, v in p_stats.items()}
        stats |= {f"reward_model/{k}": float(v) for k, v in r_stats.items()}
        for name, value in coding_metrics(rollouts, executions, unit_tests).items():
            if value is not None:
                stats[f"reward_model/{name}" if name != "acc" else "policy/gt_pass_all_acc"] = float(value)
        return policy, reward, stats

    def propose(
        self, inputs: AdaptInputs, job: ProposalRequest, *, env_model: Generator | None
    ) -> pl.DataFrame:
        """LLM rewrites of too-easy / too-hard problems anchored to the root problem (spec §3.1)."""
        from rla_core.coding.rewriter import critic_feedback, pass_rates, proposal_rows, rewrite_prompt
        from rla_core.errors import ConfigError

        targets, frames, seed, iteration = job.targets, job.frames, job.seed, job.iteration
        if not targets:  # no task needs rewriting: the stage opens no environment model
            return empty_frame("proposals")
        if env_model is None:
            raise ConfigError(
                "coding problems are rewritten by an environment model: set models.environment, or "
                "adaptation.enabled=false for a static problem set"
            )
        rates = pass_rates(frames["executions"])
        unit_tests = frames["unit_tests"]
        section = need(inputs.coding, Setting.CODING)
        limit = section.max_prompt_test_chars
        prompts: list[str] = []
        contexts: list[tuple[RewriteTarget, CodingTask, dict[str, Any]]] = []
        for target in targets:
            current = coding_task(target.task_id, target.spec)
            root = coding_task(target.slot_id, target.root_spec)
            mine = rates.filter(pl.col("task_id") == target.task_id)
            gt_rate, gen_rate = _rates_by_test(mine, "gt"), _rates_by_test(mine, "generated")
            gen = unit_tests.filter(pl.col("task_id") == target.task_id).sort("test_idx")
            feedback = critic_feedback(
                gt_tests=list(current.tests),
                gt_rates=[gt_rate.get(k) for k in range(len(current.tests))],
                generated_tests=list(zip(gen["test_input"], gen["test_output"], strict=True)),
                generated_rates=[gen_rate.get(k) for k in gen["test_idx"]],
                max_chars=limit,
            )
            prompt = rewrite_prompt(
                root=root, current=current, feedback=feedback, goal=target.goal.value, prev_acc=target.prev_acc,
                min_tests=section.min_rewrite_tests, time_limit_s=section.env_time_limit_s, max_chars=limit,
            )  # fmt: skip
            prompts.append(prompt)
            contexts.append((target, current, feedback))
        if not prompts:
            return empty_frame("proposals")
        outputs = env_model.generate(
            [env_model.format_prompt(p) for p in prompts],
            n=inputs.adaptation.candidates,
            sampling=inputs.adaptation.sampling,
            seed=seed,
        )
        frames_out = [
            proposal_rows(
                iteration=iteration,
                slot_id=target.slot_id,
                parent=current,
                goal=target.goal.value,
                prev_acc=target.prev_acc,
                feedback=feedback,
                candidates=[g.text for g in gens],
                min_tests=section.min_rewrite_tests,
                time_limit_s=section.env_time_limit_s,
            )
            for (target, current, feedback), gens in zip(contexts, outputs, strict=True)
        ]
        return pl.concat(frames_out)
