"""The environment model's rewrites sampled in one call equal one call per slot, on a real tiny model.

adapt's LLM rewriters used to call the model once per rewrite target (its k attempts); they now sample
every target's attempts in one generate call, which shards over a Ray cluster. Each attempt keeps the
seed its slot's own call gave it, so a run's 'proposals' do not change: checked here against the
per-slot calls written out by hand, with prompts of different lengths batched together (left padding).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rla_core.algo.adaptation import Goal
from rla_core.algo.seeds import derive_seed
from rla_core.config import SamplingConfig
from rla_core.envs.rewriter import (
    Candidate,
    ModelRewriter,
    RewriteRequest,
    TextWorldPrompts,
    parse_candidate,
    rewrite_tasks,
)
from rla_core.envs.textworld_env import TextWorldEnv
from rla_core.models.generator import TransformersGenerator
from tests.envs.conftest import ONE_STEP, TWO_STEP

SEED, K = 5, 3
SAMPLING = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=8)


class PerSlotCalls:
    """The rewriter as it sampled before batching: one generate call per slot, its k attempts seeded
    ``derive_seed(seed, slot_id) + i``."""

    def __init__(self, rewriter: ModelRewriter) -> None:
        self.rewriter = rewriter

    def propose(self, request: RewriteRequest, *, k: int, seed: int) -> list[Candidate]:
        gen = self.rewriter.generator
        outs = gen.generate(
            [gen.format_prompt(p) for p in self.rewriter.form.prompts(request, k=k)],
            n=1,
            sampling=self.rewriter.sampling,
            seed=derive_seed(seed, request.slot_id),
        )
        return [parse_candidate(o[0].text) for o in outs]


@pytest.mark.timeout(300)
def test_one_call_for_every_slot_gives_each_slots_own_calls_candidates(
    env: TextWorldEnv, tiny_policy_dir: Path, tmp_path: Path
) -> None:
    rewriter = ModelRewriter(TextWorldPrompts(), TransformersGenerator(tiny_policy_dir), sampling=SAMPLING)
    wider = {**TWO_STEP, "nb_objects": 6}
    requests = [
        RewriteRequest("s-a", "t-a", ONE_STEP, ONE_STEP, Goal.HARDER, 1.0),
        RewriteRequest("s-b", "t-b", wider, TWO_STEP, Goal.EASIER, 0.0),
        RewriteRequest("s-c", "t-c", TWO_STEP, TWO_STEP, Goal.HARDER, 0.875),
    ]
    batched = rewrite_tasks(requests, rewriter=rewriter, env=env, k=K, seed=SEED, iteration=1)
    per_slot = rewrite_tasks(requests, rewriter=PerSlotCalls(rewriter), env=env, k=K, seed=SEED, iteration=1)
    assert batched["spec"].n_unique() == len(requests) * K  # every attempt its own sample: the seeds matter
    batched.write_parquet(tmp_path / "batched.parquet")
    per_slot.write_parquet(tmp_path / "per_slot.parquet")
    assert (tmp_path / "batched.parquet").read_bytes() == (tmp_path / "per_slot.parquet").read_bytes()
