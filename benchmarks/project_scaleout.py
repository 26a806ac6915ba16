"""Projection (not a measurement): the iteration time of the ``paper-textgame`` preset on 1 vs N GPU nodes.

Inputs, each read from where it is declared:

* the sizes from the preset itself (``load_config``): episodes per iteration (tasks × rollouts), steps per
  episode, judgments per step, the evaluation's size and period (held-out tasks: the lines of its JSONL),
  and requests in flight per vLLM server;
* CPU costs measured here (``benchmarks/results/scaleout.json``, ``bench_scaleout.py`` on the ``alfworld``
  engine, whole rooms, 2 loaded cores): one step of the rollout body in one process (engine step, planner
  label, the episode's reset amortised, and the tiny policy's own CPU generation: an upper bound of the
  environment's share), a shard actor's start and the stage's merge;
* GPUs per node from ``infra/k8s/raycluster.yaml`` (the worker group's ``nvidia.com/gpu`` limit);
* generation rates and token counts from ``benchmarks/results/projection_inputs.json``: a published
  saturated vLLM throughput, a published single-stream rate scaled by memory bandwidth, and stated
  assumptions; and, for a second total, the ALFWorld step's parts measured separately under heavier load
  (engine step, planner label, reset).

The model, one shard per GPU (``cluster.workers`` = W = GPUs, ``gpus_per_worker=1``, TP 1), every stage's
shards in parallel:

* rollout: each shard plays e = ceil(E / W) episodes in lock step for S steps; a step costs e CPU steps in
  the shard's process plus one batched generation of t_p tokens per episode, each token taking
  max(1 / r_1, e / r_sat) (latency-bound below saturation):
  ``T_rollout = t_start + S · (e · c_step + t_p · max(1/r_1, e/r_sat))``;
* judge: m · E · S judgments of t_j tokens, spread over W servers, each at min(r_sat, in_flight · r_1):
  ``T_judge = t_start + m·E·S·t_j / (W · min(r_sat, in_flight · r_1))``;
* evaluate: the rollout formula on the held-out episodes, divided by the evaluation period;
* t_start = vLLM start + actor start + merge. Label, adapt and the two updates are not projected (no GPU
  measurement of them here).

The weak-scaling view (``--weak``) is the same model on the workload users actually run on N nodes: each
node plays the one-node episodes, so N × E episodes (and N × the judgments) per iteration on N × W shards;
the held-out evaluation keeps its size (:func:`weak`).

Run: ``.venv/bin/python benchmarks/project_scaleout.py`` (prints the table of docs/gpus-and-scale.md; no
Ray, no GPU; < 2 s); ``--weak`` prints the weak-scaling table beside it. ``tests/infra/test_project_scaleout.py``
checks the formula by hand and that the page shows both outputs.
"""

from __future__ import annotations

import argparse
import json
import math
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from rla_core.config import RunConfig, load_config

REPO = Path(__file__).resolve().parents[1]
SCALEOUT = REPO / "benchmarks" / "results" / "scaleout.json"
INPUTS = REPO / "benchmarks" / "results" / "projection_inputs.json"
MANIFEST = REPO / "infra" / "k8s" / "raycluster.yaml"
PRESET = "paper-textgame"


@dataclass(frozen=True)
class Workload:
    """One iteration's generating work, from the preset."""

    episodes: int  # E: rollout episodes per iteration
    steps: int  # S: steps per episode (the cut; every episode assumed to run to it)
    judgments_per_step: int  # m
    eval_episodes: int
    eval_steps: int
    eval_every: int
    in_flight: int  # requests in flight per vLLM server


@dataclass(frozen=True)
class Rates:
    """Per-step CPU cost (s), generation rates (tokens/s per GPU) and token counts per request."""

    cpu_step_s: float  # c_step
    start_s: float  # t_start: vLLM start + actor start + merge, per stage
    single_stream: float  # r_1
    saturated: float  # r_sat
    policy_tokens: int  # t_p
    judge_tokens: int  # t_j


def rollout_s(episodes: int, steps: int, workers: int, rates: Rates) -> float:
    """Seconds of a rollout-like stage (rollout, evaluate) on ``workers`` one-GPU shards."""
    per_shard = math.ceil(episodes / workers)
    per_token = max(1.0 / rates.single_stream, per_shard / rates.saturated)
    return rates.start_s + steps * (per_shard * rates.cpu_step_s + rates.policy_tokens * per_token)


def judge_s(judgments: int, workers: int, in_flight: int, rates: Rates) -> float:
    """Seconds of the judge stage: every judgment independent, so each server runs at its batch rate."""
    rate = min(rates.saturated, in_flight * rates.single_stream)
    return rates.start_s + judgments * rates.judge_tokens / (workers * rate)


def project(work: Workload, rates: Rates, workers: int) -> dict[str, float]:
    """The projected seconds per iteration of each projected stage on ``workers`` GPUs, and their sum."""
    out = {
        "rollout": rollout_s(work.episodes, work.steps, workers, rates),
        "judge": judge_s(
            work.judgments_per_step * work.episodes * work.steps, workers, work.in_flight, rates
        ),
        "evaluate": rollout_s(work.eval_episodes, work.eval_steps, workers, rates) / work.eval_every,
    }
    out["total"] = sum(out.values())
    return out


def workload(cfg: RunConfig) -> Workload:
    eval_tasks = cfg.textgame.eval_tasks
    if eval_tasks is None:
        raise SystemExit(f"preset {PRESET} has no textgame.eval_tasks; the projection needs its size")
    held_out = sum(1 for line in (REPO / eval_tasks).read_text(encoding="utf-8").splitlines() if line.strip())
    return Workload(
        episodes=cfg.rollout.tasks_per_iter * cfg.rollout.rollouts_per_task,
        steps=cfg.rollout.max_steps,
        judgments_per_step=cfg.judge.m,
        eval_episodes=held_out * cfg.evaluation.rollouts_per_task,
        eval_steps=cfg.evaluation.max_steps,
        eval_every=cfg.evaluation.every,
        in_flight=cfg.models.serving.max_in_flight,
    )


def measured_rates(scaleout: dict[str, Any], inputs: dict[str, Any]) -> Rates:
    local = scaleout["profile_local"]
    shards = scaleout["profile_ray_2"]["shards"]
    bandwidth = inputs["memory_bandwidth_tb_s"]
    return Rates(
        cpu_step_s=local["play_s"] / local["steps"],
        start_s=inputs["vllm_start_s"]["value"]
        + max(s["open_s"] for s in shards)
        + scaleout["profile_ray_2"]["outside_shards_s"],
        single_stream=inputs["single_stream_tokens_per_s_a100"]["value"]
        * bandwidth["h100_sxm"]
        / bandwidth["a100_40gb"],
        saturated=inputs["saturated_tokens_per_s_per_gpu"]["value"],
        policy_tokens=inputs["policy_tokens_per_step"]["value"],
        judge_tokens=inputs["judge_tokens_per_judgment"]["value"],
    )


def component_step_s(inputs: dict[str, Any], steps: int) -> float:
    """c_step from the separately measured costs: engine step + planner label + the reset amortised."""
    parts = inputs["component_step_costs_under_load"]
    return float(parts["engine_step_s"] + parts["planner_label_s"] + parts["reset_s"] / steps)


def gpus_per_node(manifest: Path = MANIFEST) -> int:
    """The GPU limit of the RayCluster's worker group (one group)."""
    for doc in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
        if doc and doc.get("kind") == "RayCluster":
            (group,) = doc["spec"]["workerGroupSpecs"]
            (container,) = group["template"]["spec"]["containers"]
            return int(container["resources"]["limits"]["nvidia.com/gpu"])
    raise SystemExit(f"{manifest} has no RayCluster")


def _stage_rows(works: dict[int, Workload], what: str) -> tuple[list[str], dict[int, dict[str, float]]]:
    """Header and rows shared by both tables: minutes per stage for each node count's workload (``works``),
    and the total again with the component step cost measured under load; also the projections."""
    rates = measured_rates(json.loads(SCALEOUT.read_text()), json.loads(INPUTS.read_text()))
    gpus = gpus_per_node()
    first = next(iter(works.values()))
    runs = {n: project(w, rates, n * gpus) for n, w in works.items()}
    heavy = replace(rates, cpu_step_s=component_step_s(json.loads(INPUTS.read_text()), first.steps))
    head = "| stage (projected, minutes per iteration) | " + " | ".join(
        f"{n} node{'s' if n > 1 else ''} ({n * gpus} shards{what.format(E=w.episodes)})"
        for n, w in works.items()
    )
    lines = [head + " |", "|---|" + "---:|" * len(works)]
    for stage in ("rollout", "judge", "evaluate", "total"):
        label = {"evaluate": f"evaluate (every {first.eval_every}th iteration, amortised)"}.get(stage, stage)
        cells = " | ".join(f"{runs[n][stage] / 60:.1f}" for n in works)
        lines.append(f"| {'**total projected**' if stage == 'total' else label} | {cells} |")
    cells = " | ".join(f"{project(w, heavy, n * gpus)['total'] / 60:.1f}" for n, w in works.items())
    lines.append(
        f"| total with c_step = {heavy.cpu_step_s * 1000:.0f} ms (the component costs under load) | {cells} |"
    )
    return lines, runs


def table(nodes: tuple[int, ...] = (1, 8)) -> str:
    """The markdown table of docs/gpus-and-scale.md: minutes per stage and per iteration, per node count."""
    work = workload(load_config(None, preset=PRESET))
    rates = measured_rates(json.loads(SCALEOUT.read_text()), json.loads(INPUTS.read_text()))
    lines, _ = _stage_rows(dict.fromkeys(nodes, work), "")
    inputs = (
        f"Inputs: E={work.episodes} episodes × S={work.steps} steps (every episode assumed to run all S), "
        f"m={work.judgments_per_step}, {work.eval_episodes} held-out episodes × {work.eval_steps} steps; "
        f"c_step={rates.cpu_step_s * 1000:.1f} ms, t_start={rates.start_s:.1f} s, r_1={rates.single_stream:.0f} "
        f"tokens/s, r_sat={rates.saturated:.0f} tokens/s, t_p={rates.policy_tokens}, t_j={rates.judge_tokens}, "
        f"in_flight={work.in_flight}."
    )
    lines.append("")
    lines.extend(textwrap.wrap(inputs, width=108, break_on_hyphens=False))
    return "\n".join(lines)


def weak(work: Workload, nodes: int) -> Workload:
    """The weak-scaling workload of ``nodes`` nodes: each plays the one-node episodes (N × E per iteration,
    and with them N × the judgments); the held-out evaluation is one fixed set, so it keeps its size."""
    return replace(work, episodes=work.episodes * nodes)


def weak_table(nodes: tuple[int, ...] = (1, 8)) -> str:
    """The weak-scaling table of docs/gpus-and-scale.md: minutes per stage when N nodes play N × E episodes,
    and the episodes per hour that buys (same model, rates and assumptions as :func:`table`)."""
    one = workload(load_config(None, preset=PRESET))
    works = {n: weak(one, n) for n in nodes}
    lines, runs = _stage_rows(works, ", E={E}")
    per_hour = {n: works[n].episodes * 3600 / runs[n]["total"] for n in nodes}
    lines.append("| rollout episodes per hour | " + " | ".join(f"{per_hour[n]:,.0f}" for n in nodes) + " |")
    first = nodes[0]
    lines.append(
        f"| throughput vs {first} node{'s' if first > 1 else ''} | "
        + " | ".join(f"{per_hour[n] / per_hour[first]:.1f}×" for n in nodes)
        + " |"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--weak", action="store_true", help="N nodes play N × the episodes (weak scaling)")
    args = parser.parse_args()
    print(weak_table(tuple(args.nodes)) if args.weak else table(tuple(args.nodes)))


if __name__ == "__main__":
    main()
