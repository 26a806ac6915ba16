"""RL update (spec §4) and SFT on the session's tiny model: measured effects, exact loss components."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
import torch
from pydantic import ValidationError

from rla_core.config import LoraConfig, SamplingConfig, TrainConfig
from rla_core.errors import ModelError
from rla_core.models.bootstrap import resolve_device
from rla_core.models.generator import TransformersGenerator
from rla_core.models.launch import ACCELERATE_CONFIG_DIR, ACCELERATE_CONFIGS, WorkerSpec
from rla_core.models.logprobs import response_logprobs
from rla_core.models.rows import TrainRow
from rla_core.models.sft import sft
from rla_core.models.update import rl_update

PROMPTS = [
    "You are in a kitchen. Action:",
    "Goal: take the key. Action:",
    "You are in a bedroom. Action:",
    "Is the step good? Answer",
]
RESPONSES = [" take key", " open chest", " go north", " \\boxed{1}"]
CFG = TrainConfig(lr=3e-3, update_per_step=2, micro_batch_size=2)


def _rows(advantage: float) -> pl.DataFrame:
    return pl.DataFrame({"prompt": PROMPTS, "response": RESPONSES, "advantage": [advantage] * len(PROMPTS)})


def _mean_logprob(model_dir: Path) -> float:
    values = response_logprobs(model_dir, PROMPTS, RESPONSES)
    return sum(values) / len(values)


def test_positive_advantage_raises_logprob(tiny_model: Path, tmp_path: Path) -> None:
    before = _mean_logprob(tiny_model)
    metrics = rl_update(tiny_model, _rows(1.0), cfg=CFG, out_dir=tmp_path / "up", seed=0, lora=LoraConfig())
    assert _mean_logprob(tmp_path / "up") > before + 0.1
    # N = 4 rows, update_per_step = 2 → grad_accum = ceil(4/2) = 2 → 2 optimizer steps.
    assert (metrics["optimizer_steps"], metrics["grad_accum"], metrics["rows_used"]) == (2.0, 2.0, 4.0)
    # π_old is the same model: the first micro-step has πθ = π_old exactly, so k3 = e^0 - 1 - 0 = 0.
    assert metrics["kl_first_micro_step"] == 0.0
    assert metrics["noop"] == 0.0 and metrics["grad_norm"] > 0.0


def test_negative_advantage_lowers_logprob(tiny_model: Path, tmp_path: Path) -> None:
    before = _mean_logprob(tiny_model)
    rl_update(tiny_model, _rows(-1.0), cfg=CFG, out_dir=tmp_path / "down", seed=0, lora=LoraConfig())
    assert _mean_logprob(tmp_path / "down") < before - 0.1


def test_lora_update_is_merged(tiny_model: Path, tmp_path: Path) -> None:
    before = _mean_logprob(tiny_model)
    lora = LoraConfig(enabled=True, r=4, alpha=8)
    rl_update(tiny_model, _rows(1.0), cfg=CFG, out_dir=tmp_path / "lora", seed=0, lora=lora)
    # A plain checkpoint (adapters merged): no adapter files, loads without peft, likelihood moved up.
    assert not (tmp_path / "lora" / "adapter_config.json").exists()
    assert _mean_logprob(tmp_path / "lora") > before


def test_drop_and_truncate_counts(tiny_model: Path, tmp_path: Path) -> None:
    rows = pl.DataFrame(
        {
            "prompt": ["go", "You are in a kitchen. There is a fridge and a counter here.", "go"],
            "response": [" north", " north", " take key and open the chest now"],
            "advantage": [1.0, 1.0, -1.0],
        }
    )
    cfg = TrainConfig(lr=1e-4, max_prompt_len=4, max_gen_len=3)
    metrics = rl_update(tiny_model, rows, cfg=cfg, out_dir=tmp_path / "o", seed=0, lora=LoraConfig())
    # Row 1's prompt has more than 4 tokens → dropped; row 2's response has more than 3 → truncated.
    assert metrics["rows_in"] == 3.0
    assert metrics["rows_dropped_prompt_too_long"] == 1.0
    assert metrics["rows_truncated"] == 1.0
    assert metrics["rows_used"] == 2.0
    # 2 rows, update_per_step = 4 → grad_accum = ceil(2/4) = 1 → one step per row = 2 steps.
    assert metrics["optimizer_steps"] == 2.0


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        (
            pl.DataFrame(
                {"prompt": [], "response": [], "advantage": []},
                schema={"prompt": pl.String, "response": pl.String, "advantage": pl.Float64},
            ),
            "empty_batch",
        ),
        (_rows(0.0), "zero_advantages"),
    ],
)
def test_noop_copies_checkpoint(tiny_model: Path, tmp_path: Path, rows: pl.DataFrame, reason: str) -> None:
    out = tmp_path / "noop"
    metrics = rl_update(tiny_model, rows, cfg=CFG, out_dir=out, seed=0, lora=LoraConfig())
    assert metrics["noop"] == 1.0 and metrics[f"noop_{reason}"] == 1.0 and metrics["optimizer_steps"] == 0.0
    assert (out / "model.safetensors").read_bytes() == (tiny_model / "model.safetensors").read_bytes()


def test_load_errors(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model path does not exist"):
        rl_update(
            tmp_path / "missing", _rows(1.0), cfg=CFG, out_dir=tmp_path / "o", seed=0, lora=LoraConfig()
        )
    no_tok = tmp_path / "no-tok"
    no_tok.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model / name, no_tok / name)
    with pytest.raises(ModelError, match=r"missing tokenizer_config\.json"):
        sft(no_tok, _rows(1.0), out_dir=tmp_path / "o", epochs=1, lr=1e-3, seed=0)
    with pytest.raises(ModelError, match="lack columns"):
        rl_update(
            tiny_model,
            _rows(1.0).drop("advantage"),
            cfg=CFG,
            out_dir=tmp_path / "o",
            seed=0,
            lora=LoraConfig(),
        )


def test_sft_reproduces_demonstrations_and_reloads(tiny_model: Path, tmp_path: Path) -> None:
    rows = pl.DataFrame({"prompt": PROMPTS[:3], "response": RESPONSES[:3]})
    metrics = sft(tiny_model, rows, out_dir=tmp_path / "sft", epochs=40, lr=3e-3, seed=0)
    assert metrics["loss"] < metrics["first_loss"] and metrics["optimizer_steps"] == 40.0
    # The saved checkpoint reloads and generates; greedy decoding reproduces each demo and then stops (EOS).
    gen = TransformersGenerator(tmp_path / "sft", device="cpu")
    out = gen.generate(PROMPTS[:3], n=1, sampling=SamplingConfig(temperature=0.0, max_new_tokens=12), seed=0)
    gen.close()
    assert [s[0].text for s in out] == RESPONSES[:3]
    assert [s[0].finish_reason for s in out] == ["stop"] * 3


def test_prompt_weight_mixes_prompt_and_response_token_losses(tiny_model: Path) -> None:
    from trl.trainer.utils import selective_log_softmax

    from rla_core.models.checkpoints import load_model
    from rla_core.models.logprobs import response_token_logps, weighted_sequence_nll

    model, tokenizer = load_model(tiny_model)
    rows = [
        TrainRow(tokenizer(p)["input_ids"], tokenizer(r)["input_ids"], 1.0)
        for p, r in zip(PROMPTS[:2], RESPONSES[:2], strict=True)
    ]
    with torch.no_grad():
        logps, mask = response_token_logps(model, rows, "cpu")
        response_only = float(-(logps * mask).sum() / mask.sum())
        # weight 0: the response tokens alone, as plain SFT
        assert float(weighted_sequence_nll(model, rows, "cpu", 0.0)) == pytest.approx(response_only, rel=1e-5)
        # weight 1, one row: every predicted token counts once, which is the model's own LM loss
        ids = torch.tensor([rows[0].prompt_ids + rows[0].response_ids])
        lm_loss = float(model(input_ids=ids, labels=ids).loss)
        assert float(weighted_sequence_nll(model, rows[:1], "cpu", 1.0)) == pytest.approx(lm_loss, rel=1e-5)
        # weight w: (w * prompt NLL sum + response NLL sum) / (w * prompt tokens + response tokens)
        p_len, r_len = len(rows[0].prompt_ids), len(rows[0].response_ids)
        token_nll = -selective_log_softmax(model(input_ids=ids).logits[:, :-1], ids[:, 1:])[0]
        prompt_sum, response_sum = float(token_nll[: p_len - 1].sum()), float(token_nll[p_len - 1 :].sum())
        expected = (0.25 * prompt_sum + response_sum) / (0.25 * (p_len - 1) + r_len)
        assert float(weighted_sequence_nll(model, rows[:1], "cpu", 0.25)) == pytest.approx(expected, rel=1e-5)


def test_sft_with_prompt_loss_and_cosine_schedule_learns_the_prompts_too(
    tiny_model: Path, tmp_path: Path
) -> None:
    rows = pl.DataFrame({"prompt": PROMPTS[:3], "response": RESPONSES[:3]})
    plain = sft(tiny_model, rows, out_dir=tmp_path / "plain", epochs=30, lr=3e-3, seed=0)
    mixed = sft(
        tiny_model, rows, out_dir=tmp_path / "mixed", epochs=30, lr=3e-3, seed=0, batch_size=2,
        prompt_weight=1.0, cosine=True,
    )  # fmt: skip
    assert mixed["optimizer_steps"] == 60.0 and plain["optimizer_steps"] == 30.0
    # the prompts' own text (after their first 3 characters) becomes likely only when it is in the loss
    heads, tails = [p[:3] for p in PROMPTS[:3]], [p[3:] for p in PROMPTS[:3]]
    before = sum(response_logprobs(tiny_model, heads, tails))
    gain_plain = sum(response_logprobs(tmp_path / "plain", heads, tails)) - before
    gain_mixed = sum(response_logprobs(tmp_path / "mixed", heads, tails)) - before
    assert gain_mixed > 1.0 and gain_mixed > gain_plain + 1.0
    with pytest.raises(ModelError, match="batch_size >= 1"):
        sft(tiny_model, rows, out_dir=tmp_path / "bad", epochs=1, lr=3e-3, seed=0, batch_size=0)


# ---- declarations the trainer and its worker share ------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def _package_sources() -> list[tuple[str, ast.Module]]:
    return [
        (str(p.relative_to(ROOT)), ast.parse(p.read_text(encoding="utf-8")))
        for package in ("rla_core", "tasks", "flows")
        for p in sorted((ROOT / package).rglob("*.py"))
    ]


def test_one_device_resolver() -> None:
    # One definition, and nowhere else a device setting's "auto" is compared by hand.
    defs = [
        (path, node.name)
        for path, tree in _package_sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and "device" in node.name and "resolve" in node.name
    ]
    assert defs == [("rla_core/models/bootstrap.py", "resolve_device")]
    by_hand = [
        f"{path}:{node.lineno}"
        for path, tree in _package_sources()
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        and "device" in ast.unparse(node.left)
        and any(isinstance(c, ast.Constant) and c.value == "auto" for c in node.comparators)
    ]
    assert len(by_hand) == 1 and by_hand[0].startswith("rla_core/config/choices.py:"), (
        by_hand
    )  # machine_device


def test_device_resolver_errors_name_the_setting() -> None:
    assert resolve_device("cpu", setting="models.device") == "cpu"
    assert resolve_device("auto", setting="training.device") == (
        "cuda" if torch.cuda.is_available() else "cpu"
    )
    with pytest.raises(ModelError, match=r"models\.device='gpu' is not a torch device"):
        resolve_device("gpu", setting="models.device")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match=r"training\.device='cuda:1' but torch sees no CUDA device"):
            resolve_device("cuda:1", setting="training.device")


def test_worker_spec_round_trips_and_rejects_what_it_does_not_declare(tmp_path: Path) -> None:
    spec = WorkerSpec(
        model_dir=tmp_path / "in",
        out_dir=tmp_path / "out",
        metrics_path=tmp_path / "metrics.json",
        error_dir=tmp_path,
        rows=(TrainRow([1, 2], [3], 0.5), TrainRow([4], [5, 6], -1.0)),
        cfg=CFG,
        lora=LoraConfig(enabled=True),
        seed=7,
        device="cpu",
        dtype="bf16",
        threads=2,
    )
    spec.write(tmp_path / "spec.json")
    back = WorkerSpec.read(tmp_path / "spec.json")
    assert back == spec and back.rows[1] == TrainRow([4], [5, 6], -1.0) and back.cfg == CFG
    raw = json.loads((tmp_path / "spec.json").read_text())
    for broken in (
        {**raw, "extra": 1},
        {**raw, "dtype": "int8"},
        {k: v for k, v in raw.items() if k != "rows"},
    ):
        (tmp_path / "bad.json").write_text(json.dumps(broken))
        with pytest.raises(ValidationError):
            WorkerSpec.read(tmp_path / "bad.json")


def test_the_worker_uses_no_private_names_of_other_objects() -> None:
    # train_worker reaches other modules and accelerate only through public names (self._x is its own).
    tree = ast.parse((ROOT / "rla_core/models/train_worker.py").read_text(encoding="utf-8"))
    private = [
        f"{ast.unparse(node)} (line {node.lineno})"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]
    assert private == []
    imported = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert imported == []


def test_the_deepspeed_config_the_errors_name_exists() -> None:
    assert (ACCELERATE_CONFIG_DIR / ACCELERATE_CONFIGS["deepspeed"]).is_file()
    source = (ROOT / "rla_core/models/train_worker.py").read_text(encoding="utf-8")
    assert "deepspeed.yaml" not in source  # the name comes from trainer.ACCELERATE_CONFIGS
