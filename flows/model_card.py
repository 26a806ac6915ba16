"""The model card `rla export` writes next to the exported checkpoints (README.md).

It says where the models came from (run, iteration, stage attempt, config hash, code version) and how
to prompt them: the prompt format is shown with a real prompt and response from the run's own
rollouts (policy) and judgments or unit tests (reward model). A free-form prompt gets nothing useful
from these tiny models; they were trained on exactly this format.
"""

from __future__ import annotations

from dataclasses import dataclass

from rla_core.errors import ConfigError
from rla_core.store import ArtifactStore

_FENCE = "````"


@dataclass(frozen=True)
class Exported:
    """One exported checkpoint: its role, source iteration and stage, and where it went."""

    role: str
    iteration: int
    stage: str
    target: str


def _example(store: ArtifactStore, run_id: str, upto: int, artifact: str) -> tuple[int, str, str] | None:
    """(iteration, prompt, response) of the first row of ``artifact`` at the latest iteration ≤ ``upto``."""
    from flows.runs import find_frame

    for it in sorted((i for i in store.list_iterations(run_id) if 0 < i <= upto), reverse=True):
        try:
            stage = find_frame(store, run_id, it, artifact)
        except ConfigError:
            continue
        df = store.read_frame(run_id, it, stage, artifact)
        if df.height and {"prompt", "response"} <= set(df.columns):
            return it, str(df["prompt"][0]), str(df["response"][0])
    return None


def _block(title: str, example: tuple[int, str, str] | None, what: str) -> list[str]:
    if example is None:
        return [f"### {title}", "", f"No {what} of this run at or before the exported iteration to show.", ""]
    it, prompt, response = example
    return [
        f"### {title}",
        "",
        f"A real {what} from iteration {it} of the run. Send the prompt text exactly in this format (no chat "
        "template); the model answers with reasoning ending in `\\boxed{…}`.",
        "",
        "Prompt:",
        "",
        _FENCE + "text",
        prompt,
        _FENCE,
        "",
        "Response:",
        "",
        _FENCE + "text",
        response,
        _FENCE,
        "",
    ]


def model_card(store: ArtifactStore, run_id: str, exported: list[Exported]) -> str:
    """The markdown model card for checkpoints exported from ``run_id``."""
    from flows.runs import load_run_config, resolve_mlflow_uri, resolve_root

    info = store.read_run_info(run_id)
    cfg = load_run_config(store, run_id)
    upto = max(e.iteration for e in exported)
    lines = [
        f"# rlanything checkpoints from run `{run_id}`",
        "",
        "| checkpoint | source | directory |",
        "|---|---|---|",
        *(f"| {e.role} | iteration {e.iteration}, stage `{e.stage}` | `{e.target}` |" for e in exported),
        "",
        f"- setting: `{cfg.setting}`; base models: policy `{cfg.models.policy}`, reward `{cfg.models.reward}`",
        f"- config hash: `{info.config_hash}`; code version: `{info.code_version}`; "
        f"package {info.package_version}",
        f"- artifacts: `{resolve_root(store.run_location(run_id))}`",
        f"- MLflow: `{resolve_mlflow_uri(cfg.tracking.mlflow_uri)}`, experiment `{cfg.tracking.experiment}`, "
        f"tag `rla.run_id={run_id}`",
        "",
        "Load with `AutoModelForCausalLM.from_pretrained(dir)` and `PreTrainedTokenizerFast.from_pretrained(dir)`"
        " (AutoTokenizer may map the tiny models' tokens differently).",
        "",
        "## Prompt format",
        "",
        *_block("Policy", _example(store, run_id, upto, "rollouts"), "policy prompt"),
        *_block(
            "Reward model",
            _example(store, run_id, upto, "judgments") or _example(store, run_id, upto, "unit_tests"),
            "reward-model prompt",
        ),
    ]
    return "\n".join(lines)
