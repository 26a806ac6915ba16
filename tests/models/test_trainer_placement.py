"""Where updates run: fp32 master weights and checkpoints, `accelerate launch` workers.

Tolerances are stated next to each check. The multi-process test launches the workers exactly as a GPU
node does (`accelerate launch --config_file infra/accelerate/ddp.yaml --num_processes 2 ...`); on this
CPU machine the workers pick gloo. FSDP and ZeRO-3 need GPUs (docs/gpus-and-scale.md, "Training paths").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from rla_core.config import LoraConfig, TrainConfig, load_config
from rla_core.errors import ConfigError, ModelError, ProcessError
from rla_core.models.launch import Placement, accelerate_config, accelerate_env, launch_argv
from rla_core.models.train_worker import merge_lora_state_dict
from rla_core.models.update import plan_micro_batches, rl_update
from rla_core.procs import default_runtime_dir

PROMPTS = [
    "You are in a kitchen. Action:",
    "Goal: take the key. Action:",
    "You are in a bedroom. Action:",
    "Is the step good? Answer",
    "You are in a bedroom. There is a chest here.",
]
RESPONSES = [" take key", " open chest", " go north", " \\boxed{1}", " open chest"]
ROWS = pl.DataFrame({"prompt": PROMPTS, "response": RESPONSES, "advantage": [1.0, -1.0, 0.5, 1.0, -0.5]})


def _weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return load_file(ckpt / "model.safetensors")


def _copy_with_dtype(src: Path, out: Path, dtype: torch.dtype) -> Path:
    """The tiny checkpoint re-saved in ``dtype`` (weights rounded to bf16 first, so both copies agree)."""
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).to(torch.bfloat16).to(dtype)
    model.save_pretrained(out)
    for name in os.listdir(src):
        if name.startswith("tokenizer") or name.endswith("_map.json") or name == "vocab.json":
            shutil.copy(src / name, out / name)
    return out


def test_plan_micro_batches_hand_computed() -> None:
    # 5 rows, G = 3 rows per optimizer step → steps [0, 1, 2] and [3, 4]; 2 ranks; micro-batches of 1.
    # Step 0: chunk = ceil(3/2) = 2 → rank 0 rows 0, 1; rank 1 row 2 plus one padding micro-batch (row 0,
    # weight 0). Step 1: chunk = 1 → rank 0 row 3, rank 1 row 4.
    # (Row lengths matter only with a token budget: tests/models/test_packing.py.)
    five = [4] * 5
    assert plan_micro_batches(five, 3, 1, 0, 2) == [[[(0, 1.0)], [(1, 1.0)]], [[(3, 1.0)]]]
    assert plan_micro_batches(five, 3, 1, 1, 2) == [[[(2, 1.0)], [(0, 0.0)]], [[(4, 1.0)]]]
    # One process: consecutive steps of G rows in micro-batches of 2 (the pre-issue-12 partition).
    assert plan_micro_batches(five, 3, 2, 0, 1) == [
        [[(0, 1.0), (1, 1.0)], [(2, 1.0)]],
        [[(3, 1.0), (4, 1.0)]],
    ]
    # More ranks than rows in a step: the idle rank runs one padding micro-batch.
    assert plan_micro_batches([4], 1, 8, 1, 2) == [[[(0, 0.0)]]]


def test_bf16_saved_checkpoint_updates_like_fp32(tiny_model: Path, tmp_path: Path) -> None:
    """A bf16-saved checkpoint is trained with fp32 master weights and saved fp32.

    Both inputs hold the same bf16-representable values, one stored bf16, one fp32. At lr 1e-6 the two
    updates must agree: share of changed parameters within 0.1 percentage points and max deviation
    ≤ 1e-3 of the largest update. Rounding the updated weights back to bf16 loses most of the update —
    why checkpoints stay fp32.
    """
    bf16 = _copy_with_dtype(tiny_model, tmp_path / "bf16", torch.bfloat16)
    fp32 = _copy_with_dtype(tiny_model, tmp_path / "fp32", torch.float32)
    assert {v.dtype for v in _weights(bf16).values()} == {torch.bfloat16}
    cfg = TrainConfig(lr=1e-6, update_per_step=2, micro_batch_size=8)
    for src in (bf16, fp32):
        rl_update(src, ROWS, cfg=cfg, out_dir=tmp_path / f"{src.name}-up", seed=0, lora=LoraConfig())
    start = {k: v.float() for k, v in _weights(fp32).items()}
    up_bf16, up_fp32 = _weights(tmp_path / "bf16-up"), _weights(tmp_path / "fp32-up")
    assert {v.dtype for v in up_bf16.values()} == {torch.float32}  # training checkpoints stay fp32

    def share_changed(after: dict[str, torch.Tensor]) -> float:
        changed = sum(int((after[k].float() != start[k]).sum()) for k in start)
        return changed / sum(v.numel() for v in start.values())

    share_bf16, share_fp32 = share_changed(up_bf16), share_changed(up_fp32)
    largest = max(float((up_fp32[k] - start[k]).abs().max()) for k in start)
    deviation = max(float((up_bf16[k] - up_fp32[k]).abs().max()) for k in start)
    assert share_fp32 > 0.5, share_fp32
    assert abs(share_bf16 - share_fp32) <= 1e-3, (share_bf16, share_fp32)
    assert largest > 0.0 and deviation <= 1e-3 * largest, (deviation, largest)
    rounded = {k: v.to(torch.bfloat16) for k, v in up_fp32.items()}
    assert share_changed(rounded) < 0.5 * share_fp32  # a bf16 save would round the update away


def test_gradient_checkpointing_gives_same_update(tiny_model: Path, tmp_path: Path) -> None:
    """Recomputing activations is a memory knob only: same weights to 1e-6 (abs)."""
    cfg = TrainConfig(lr=1e-3, update_per_step=2, micro_batch_size=2)
    rl_update(tiny_model, ROWS, cfg=cfg, out_dir=tmp_path / "plain", seed=0, lora=LoraConfig())
    gc = cfg.model_copy(update={"gradient_checkpointing": True})
    rl_update(tiny_model, ROWS, cfg=gc, out_dir=tmp_path / "gc", seed=0, lora=LoraConfig())
    a, b = _weights(tmp_path / "plain"), _weights(tmp_path / "gc")
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6


def test_merge_lora_state_dict_matches_peft(tiny_model: Path) -> None:
    """The FSDP/ZeRO-3 save path merges LoRA on the gathered state dict exactly as peft does (1e-6)."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    lora = LoraConfig(enabled=True, r=4, alpha=8)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    original = {k: v.clone() for k, v in model.state_dict().items()}
    peft_model = get_peft_model(
        model,
        PeftLoraConfig(r=4, lora_alpha=8, target_modules=list(lora.target_modules), task_type="CAUSAL_LM"),
    )
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.1)  # peft starts B at 0: make the adapters change something
    merged = merge_lora_state_dict(dict(peft_model.state_dict()), lora)
    reference = peft_model.merge_and_unload().state_dict()
    assert set(merged) == set(reference)
    assert max(float((merged[k] - reference[k]).abs().max()) for k in reference) <= 1e-6
    assert all(
        float((merged[k] - original[k]).abs().max()) > 0 for k in merged if k.endswith("q_proj.weight")
    )


def test_placement_from_config() -> None:
    cfg = load_config(overrides=["training.device=cpu", "training.processes=2", "training.dtype=bf16"])
    placement = Placement.from_config(cfg.training, threads=2)
    assert (placement.device, placement.dtype, placement.processes, placement.strategy) == (
        "cpu",
        "bf16",
        2,
        "ddp",
    )
    assert placement.launched
    argv = launch_argv(placement.strategy, placement.processes, placement.dtype, Path("spec.json"))
    i = argv.index("--config_file")
    assert argv[i + 1].endswith("infra/accelerate/ddp.yaml") and Path(argv[i + 1]).is_file()
    assert (
        argv[argv.index("--num_processes") + 1] == "2" and argv[argv.index("--mixed_precision") + 1] == "bf16"
    )
    assert argv[-3:] == ["-m", "rla_core.models.train_worker", "spec.json"]
    with pytest.raises(ConfigError, match=r"training\.device"):
        load_config(overrides=["training.device=gpu"])
    with pytest.raises(ConfigError, match=r"training\.strategy"):
        load_config(overrides=["training.strategy=horovod"])
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="no CUDA device"):
            Placement.from_config(load_config(overrides=["training.device=cuda"]).training)


def test_accelerate_settings_reach_workers_accelerate_does_not_launch() -> None:
    """Under Ray Train nothing reads infra/accelerate/<strategy>.yaml, so the workers get the
    ACCELERATE_* variables ``accelerate launch`` would set, derived from the same options as
    :func:`launch_argv` (the YAML + processes and mixed precision from the command line).

    The YAML's own settings come through (FSDP's sharding, DeepSpeed's ZeRO stage), the command line
    overrides the YAML's mixed precision (fsdp.yaml says bf16; fp32 gives 'no'), and an Accelerator
    created in a fresh process with only that environment — as in a Ray Train worker — reports bf16
    (without it the issue's probe saw 'no'). The two-node run under TorchTrainer: tests/flows/test_two_nodes.py.
    """
    import yaml

    ddp = accelerate_env("ddp", 2, "bf16")
    assert ddp["ACCELERATE_MIXED_PRECISION"] == "bf16"
    assert accelerate_env("fsdp", 2, "fp32")["ACCELERATE_MIXED_PRECISION"] == "no"
    fsdp = accelerate_env("fsdp", 2, "bf16")
    fsdp_yaml = yaml.safe_load(accelerate_config("fsdp").read_text())["fsdp_config"]
    assert fsdp["ACCELERATE_USE_FSDP"] == "true"
    assert fsdp["FSDP_SHARDING_STRATEGY"] == fsdp_yaml["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert fsdp["FSDP_AUTO_WRAP_POLICY"] == fsdp_yaml["fsdp_auto_wrap_policy"]
    zero = accelerate_env("deepspeed", 2, "bf16")
    assert (zero["ACCELERATE_USE_DEEPSPEED"], zero["ACCELERATE_DEEPSPEED_ZERO_STAGE"]) == ("true", "3")
    # Only accelerate's own settings: the process group and threads are the runner's.
    assert all(k.startswith(("ACCELERATE_", "FSDP_")) for env in (ddp, fsdp, zero) for k in env)
    probe = "from accelerate import Accelerator; print(Accelerator(cpu=True).mixed_precision)"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")}
    seen = subprocess.run(
        [sys.executable, "-c", probe],
        env={**clean, **ddp},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert seen.stdout.strip().splitlines()[-1] == "bf16", seen.stderr[-2000:]


def _leftovers(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker`` (a test's own temp path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmd:
                found.append(cmd)
    return found


@pytest.fixture
def one_thread() -> Iterator[None]:
    """torch's intra-op thread count pinned to 1 for the test (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tiny_model: Path, tmp_path: Path, one_thread: None) -> None:
    """2 gloo DDP workers via `accelerate launch` = 1 in-process update, bit for bit.

    5 rows, update_per_step 2 → 2 optimizer steps of G = 3 and 2 rows; micro-batches of 1, so rank 1
    runs a padding micro-batch in step 1 (plan above). Why the weights are *equal*, not close:

    - every process computes with one torch thread (the workers get threads 2 // 2 processes = 1; the
      reference is pinned by ``one_thread``), so a row's gradient is the same sequence of float ops in
      both paths. The thread count is what broke the old ``atol=1e-5`` check: the reference ran with
      whatever count earlier tests had left (2 threads: max |Δ| 1.8e-5 over 264,267 elements, every
      time, quiet or loaded), and AdamW's g/√v turns a last-bit gradient difference on a near-zero
      gradient into a step-sized weight difference;
    - each backward is scaled by W/G (spec: /G; DDP's mean over W ranks is undone by ×W): for W = 2
      that is an exact power-of-two factor that DDP's division cancels exactly;
    - accumulation order is the same: rank 0 holds g0 + g1, rank 1 g2 + 0 (the padding micro-batch has
      weight 0, its gradient is exactly 0), and gloo's two-rank all-reduce is one addition,
      (g0 + g1) + g2 — what the one process computes.

    Measured (scripts/flake_hunt.py): 0 unequal elements in 20 runs on a quiet machine and 20
    beside a 2-process CPU hog. A real bug cannot hide in this check: dropping rank 1's gradient or
    counting the padding micro-batch as a row changes weights by ~1e-3 (the update itself moves
    weights by up to ~2e-3 at lr 1e-3).
    """
    cfg = TrainConfig(lr=1e-3, update_per_step=2, micro_batch_size=1)
    one = rl_update(tiny_model, ROWS, cfg=cfg, out_dir=tmp_path / "one", seed=0, lora=LoraConfig())
    placement = Placement(device="cpu", processes=2, strategy="ddp", threads=2, timeout_s=600)
    two = rl_update(
        tiny_model, ROWS, cfg=cfg, out_dir=tmp_path / "two", seed=0, lora=LoraConfig(), placement=placement
    )
    start, a, b = _weights(tiny_model), _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert {v.dtype for v in b.values()} == {torch.float32}
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 1e-3
    assert set(a) == set(b)
    unequal = {k: int((a[k] != b[k]).sum()) for k in a if not torch.equal(a[k], b[k])}
    worst = max((float((a[k] - b[k]).abs().max()) for k in unequal), default=0.0)
    assert not unequal, f"{sum(unequal.values())} weights differ (max |Δ| {worst:.3e}): {sorted(unequal)[:5]}"
    assert (two["processes"], one["processes"]) == (2.0, 1.0)
    for key in ("optimizer_steps", "grad_accum", "rows_used", "grad_norm"):
        assert two[key] == one[key], key  # the pre-clip norm of identical gradients is identical
    # Loss sums are float64 additions of per-row values in rank order, not row order: a few ulps apart.
    for key in ("loss", "pg_loss", "kl", "clip_fraction"):
        assert two[key] == pytest.approx(one[key], rel=1e-9, abs=1e-12), key
    assert two["kl_first_micro_step"] == 0.0
    assert not _leftovers(str(tmp_path))


@pytest.mark.slow
def test_two_process_ddp_with_packed_uneven_micro_batches(
    tiny_model: Path, tmp_path: Path, one_thread: None
) -> None:
    """2 gloo DDP workers on packed micro-batches whose token budget gives the ranks different counts.

    Rows of 8, 19, 18, 5, 9 tokens (test_packing.TEXTS), twice; update_per_step 2 → 2 steps of G = 5;
    budget 24 tokens. Each step: rank 0 takes the first 3 rows, 8 | 19 | 18 (3 micro-batches: no two within
    24 tokens), rank 1 the last 2, 5 + 9 (1 micro-batch) plus 2 padding micro-batches, so both run 3
    forward/backward passes (a disagreement would hang DDP's all-reduce until the timeout). One process
    cuts the same 5 rows 8 | 19 | 18 + 5 | 9. Padding: one process 13 of 72 positions (18 + 5 right-padded
    to 2 × 18: no pack of 18 holds both), two 4 of 63 (5 + 9 padded to 2 × 9). Other passes, so float
    rounding differs: measured max |Δ| 4.2e-6 = 0.2 % of the largest update (2.0e-3; loaded 2-core
    machine, load average ~10); bound 5 %
    (dropping a rank's gradient moves weights by about half an update: the DDP test above).
    """
    from tests.models.test_packing import ROWS as PACKING_ROWS

    rows = pl.concat([PACKING_ROWS, PACKING_ROWS])
    cfg = TrainConfig(lr=1e-3, update_per_step=2, micro_batch_size=8, max_tokens_per_micro_batch=24)
    assert plan_micro_batches([8, 19, 18, 5, 9], 5, 8, 1, 2, max_tokens=24) == [
        [[(3, 1.0), (4, 1.0)], [(0, 0.0)], [(0, 0.0)]]
    ]
    one = rl_update(tiny_model, rows, cfg=cfg, out_dir=tmp_path / "one", seed=0, lora=LoraConfig())
    placement = Placement(device="cpu", processes=2, strategy="ddp", threads=2, timeout_s=600)
    two = rl_update(
        tiny_model, rows, cfg=cfg, out_dir=tmp_path / "two", seed=0, lora=LoraConfig(), placement=placement
    )
    start, a, b = _weights(tiny_model), _weights(tmp_path / "one"), _weights(tmp_path / "two")
    largest = max(float((a[k] - start[k]).abs().max()) for k in a)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert largest > 1e-4 and worst <= 0.05 * largest, (worst, largest)
    for key in ("optimizer_steps", "grad_accum", "rows_used"):
        assert two[key] == one[key], key
    assert two["loss"] == pytest.approx(one["loss"], rel=1e-4)
    assert (one["padding_share"], two["padding_share"]) == pytest.approx((13 / 72, 4 / 63))
    assert not _leftovers(str(tmp_path))


@pytest.mark.slow
def test_failing_worker_fails_with_its_error_and_leaves_nothing(tiny_model: Path, tmp_path: Path) -> None:
    """A worker that cannot load the checkpoint fails the update with its error; no process survives."""
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    cfg = TrainConfig(lr=1e-3, update_per_step=2, micro_batch_size=2)
    placement = Placement(device="cpu", processes=2, threads=2, timeout_s=600)
    with pytest.raises(ProcessError, match=r"training workers \(ddp, 2 processes\) failed") as err:
        rl_update(
            broken, ROWS, cfg=cfg, out_dir=tmp_path / "out", seed=0, lora=LoraConfig(), placement=placement
        )
    assert "rank " in str(err.value) and "safetensor" in str(err.value).lower()
    assert not (tmp_path / "out").exists()
    assert not _leftovers(str(tmp_path))
    assert not list(default_runtime_dir("train").glob(f"train-{os.getpid()}-*.json"))  # pidfile removed


def test_the_update_loop_reports_its_optimizer_steps(tiny_model: Path, tmp_path: Path) -> None:
    """5 rows, update_per_step=2: ceil(5/2)=3 rows per step, so 2 optimizer steps over 3 + 2 rows."""
    from rla_core import progress

    lines: list[str] = []
    cfg = TrainConfig(lr=1e-3, update_per_step=2, micro_batch_size=2)
    reporter = progress.Reporter("train_policy iter 1", log=lines.append, tty=False, log_every_s=0.0)
    with progress.reporting(reporter):
        rl_update(tiny_model, ROWS, cfg=cfg, out_dir=tmp_path / "up", seed=0, lora=LoraConfig())
    assert lines[0].startswith("train_policy iter 1 update: 1/2 optimizer steps")
    assert lines[-1].startswith("train_policy iter 1 update: 2/2 optimizer steps") and "5 rows" in lines[-1]
