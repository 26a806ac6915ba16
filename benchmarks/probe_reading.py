"""Can the bench policy read its action list? (docs/bench-design.md §6)

The policy answers ``I should <action text>. \\boxed{<index>}``; the index alone decides the action. A
preference learned on the text (for ``take`` over ``look``) can only carry over to unseen games if the
policy (a) writes an action that is in the prompt's list and (b) boxes that action's number. This probe
plays a policy on the training games and on the validation split (never the held-out set) and prints:

* ``text in list``: the share of steps whose text is one of the prompt's numbered actions;
* ``index given text``: among those, the share whose boxed index is that action's number;
* ``text = action``: the share of steps whose text is the action played (the product of the two);
* success, and the shares of no-op and optimal actions.

Two modes:

* ``--checkpoint DIR``: an existing policy (e.g. a run's ``iter-0000/bootstrap/attempt-*/policy``).
* ``--warm-start``: warm-start a fresh policy with the ``bench`` preset (``--set`` overrides) and probe it.
  Variants of the warm-start data, none of them a product knob (none helped; see §6):
  ``--relists K`` shows every demonstration step with K more numberings of its list (a random half of the
  other actions dropped); ``--drills N`` adds N synthetic rows whose lists name made-up objects (reading
  cannot be memorised); ``--index-first`` answers ``I choose <i>: <action>. \\boxed{<i>}``;
  ``--prompt-loss`` trains on the prompt tokens too (plain language modelling of the prompt).
  ``--arch JSON`` overrides :class:`rla_core.models.bootstrap.TinyArch` fields.

Run: ``.venv/bin/python benchmarks/probe_reading.py --checkpoint DIR`` (~15 s) or
``.venv/bin/python benchmarks/probe_reading.py --warm-start --set models.policy_demo_episodes=8 --drills 6000``
(~6 min on 2 idle cores).
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
import torch
from probe_action_shares import action_flags  # a sibling script: run these as files, not as modules

import rla_core.envs.demos as demos
import rla_core.models.bootstrap as bootstrap
from rla_core.algo.curriculum import PlayTask
from rla_core.algo.parsing import fallback_action_index, parse_action_index
from rla_core.config import TextGameEngine, load_config
from rla_core.envs.prompts import replace_action_list
from rla_core.envs.rollout import run_rollouts
from rla_core.models.generator import TransformersGenerator
from rla_core.settings.textgame import ALFWORLD, TEXTWORLD
from rla_core.stage_inputs import BootstrapInputs, RolloutInputs, RolloutRequest, SeedTasksInputs

_ACTION_LINE = re.compile(r"^(\d+): (.*)$", re.M)
_TEXT = re.compile(r"^(?:I should|I choose \d+:) (.*?)\. \\boxed")
# the same made-up words and commands as the product's reading drills (the earlier variants' draws)
_SYLLABLES, _VERBS = list(demos.DRILL_SYLLABLES), list(demos.DRILL_COMMANDS)


def reading_stats(steps: pl.DataFrame) -> dict[str, float]:
    """The probe's shares for rollout ``steps`` (columns prompt, response, action, expert_actions, done, outcome)."""
    listed = [{a: int(i) for i, a in _ACTION_LINE.findall(p)} for p in steps["prompt"].to_list()]
    responses = steps["response"].to_list()
    texts = [m.group(1) if (m := _TEXT.match(r)) else None for r in responses]
    in_list = [t is not None and t in lst for t, lst in zip(texts, listed, strict=True)]
    right = [
        ok and parse_action_index(r, len(lst)).value == lst[t]
        for ok, t, lst, r in zip(in_list, texts, listed, responses, strict=True)
    ]
    flags = action_flags(steps)
    finals = steps.filter(pl.col("done"))
    return {
        "text_in_list": sum(in_list) / len(in_list),
        "index_given_text": sum(right) / max(1, sum(in_list)),
        "text_is_action": float(
            (pl.Series(texts, dtype=pl.String) == steps["action"]).fill_null(False).mean() or 0
        ),
        "success": float((finals["outcome"] > 0).mean() or 0.0),
        "noop": float(flags["noop"].mean() or 0.0),
        "optimal": float(flags["optimal"].mean() or 0.0),
    }


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3)))


def patch_warm_start(*, relists: int, drills: int, index_first: bool, prompt_loss: bool) -> None:
    """Wrap the warm-start data functions of :mod:`rla_core.envs.demos` with the requested variants."""
    if index_first:
        demos.policy_demo_response = lambda action, index: f"I choose {index}: {action}. \\boxed{{{index}}}"
    plain = demos.policy_warm_start_rows

    def rows(cfg: Any, env: Any, specs: Any, *, seed: int) -> pl.DataFrame:
        frame = plain(cfg, env, specs, seed=seed)
        rng = random.Random(123)
        extra = []
        for prompt, response in frame.rows() if relists else ():
            actions = [a for _i, a in _ACTION_LINE.findall(prompt)]
            chosen = actions[fallback_action_index(parse_action_index(response, len(actions)), len(actions))]
            for _ in range(relists):
                kept = [a for a in actions if a == chosen or rng.random() < 0.5]
                extra.append(
                    (
                        replace_action_list(prompt, kept),
                        demos.policy_demo_response(chosen, kept.index(chosen)),
                    )
                )
        prompts = frame["prompt"].to_list()
        for _ in range(drills):
            objects = [
                " ".join(_word(rng) for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(2, 4))
            ]
            listed = {"look", "inventory"} | {f"go {rng.choice(['north', 'south', 'east', 'west'])}"}
            while len(listed) < rng.randint(5, 15):
                listed.add(rng.choice(_VERBS).format(o=rng.choice(objects), p=rng.choice(objects)))
            actions = sorted(listed)
            k = rng.randrange(len(actions))
            extra.append(
                (replace_action_list(rng.choice(prompts), actions), demos.policy_demo_response(actions[k], k))
            )
        frame = pl.concat([frame, pl.DataFrame(extra, schema=frame.schema, orient="row")])
        if (
            prompt_loss
        ):  # the SFT loss covers the response only: move all but 3 characters of the prompt there
            frame = frame.select(
                pl.col("prompt").str.slice(0, 3),
                (pl.col("prompt").str.slice(3) + pl.col("response")).alias("response"),
            )
        return frame

    demos.policy_warm_start_rows = rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, help="probe this policy checkpoint")
    parser.add_argument("--warm-start", action="store_true", help="warm-start a fresh policy, then probe it")
    parser.add_argument("--set", action="append", default=[], help="bench config override key=value")
    parser.add_argument("--relists", type=int, default=0)
    parser.add_argument("--drills", type=int, default=0)
    parser.add_argument("--index-first", action="store_true")
    parser.add_argument("--prompt-loss", action="store_true")
    parser.add_argument("--arch", default="{}", help='TinyArch fields as JSON, e.g. {"num_hidden_layers": 4}')
    parser.add_argument("--episodes", type=int, default=2, help="episodes per game")
    args = parser.parse_args()
    if (args.checkpoint is None) == (not args.warm_start):
        parser.error("give exactly one of --checkpoint DIR and --warm-start")
    torch.set_num_threads(2)
    cfg = load_config(preset="bench", overrides=args.set)
    alfworld = cfg.textgame.engine is TextGameEngine.ALFWORLD
    setting = ALFWORLD if alfworld else TEXTWORLD
    with tempfile.TemporaryDirectory() as tmp:
        policy = args.checkpoint
        if args.warm_start:
            # resolve_model calls the module's ensure_tiny_model, whose default arch is bound at definition
            arch = bootstrap.TinyArch(**json.loads(args.arch))
            bootstrap.ensure_tiny_model = functools.partial(bootstrap.ensure_tiny_model, arch=arch)
            patch_warm_start(
                relists=args.relists,
                drills=args.drills,
                index_first=args.index_first,
                prompt_loss=args.prompt_loss,
            )
            from rla_core.settings.warm_start import warm_start_models

            cfg = load_config(preset="bench", overrides=[*args.set, f"models.cache_dir={tmp}/models"])
            result = warm_start_models(BootstrapInputs.from_config(cfg), out_dir=Path(tmp) / "warm", seed=0)
            print({k: round(v, 3) for k, v in result.metrics.items() if k.startswith("policy/")})
            policy = result.policy_dir
        for split in ("bench-train", "bench-val"):
            split_cfg = cfg.model_copy(
                update={
                    "textgame": cfg.textgame.model_copy(update={"tasks": f"data/textworld/{split}.jsonl"})
                }
            )
            tasks = [
                PlayTask(s, s, False, spec)
                for s, _e, spec in setting.seed_tasks(SeedTasksInputs.from_config(split_cfg))
            ]
            generator = TransformersGenerator(
                policy, device="cpu", batch_size=cfg.models.generation_batch_size
            )
            steps = run_rollouts(
                RolloutRequest(
                    tasks=tasks,
                    n=args.episodes,
                    max_steps=cfg.evaluation.max_steps,
                    sampling=cfg.evaluation.sampling,
                    seed=7,
                    iteration=1,
                    history_turns=cfg.models.history_turns,
                    env_retries=0,
                ),
                env=setting.env(RolloutInputs.from_config(split_cfg).env()),
                generator=generator,
            )
            generator.close()
            stats = reading_stats(steps)
            print(
                f"{split}: episodes {len(tasks) * args.episodes} "
                + " ".join(f"{k} {v:.2f}" for k, v in stats.items())
            )


if __name__ == "__main__":
    main()
