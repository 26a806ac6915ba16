"""Packed micro-batches and logits at scored positions only (rla_core/models/packing.py).

Hand-built layouts first (boundaries, positions, which logits are kept), then the session's tiny model:
a packed forward pass gives each row the log-probs, loss and gradients the padded one gives, and a row's
log-probs never depend on the rows packed beside it — a check shown to fail when attention crosses rows.

Tolerances (fp32 on CPU), measured on the loaded 2-core machine (load average 4-6) and set well above:
packed vs padded log-probs differed by at most 4.8e-7 (0 for bounded packs under both sdpa and eager),
gradients by at most 9.5e-7 of a largest entry of 8.1; a row that attends to its neighbour moves by
about 0.2 nats. Bounds: 1e-5 for log-probs and losses, 1e-5 × the largest gradient entry.
"""

from __future__ import annotations

import dataclasses
import doctest
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import torch
from safetensors.torch import load_file

from rla_core.algo.losses import ppo_k3_loss
from rla_core.config import LoraConfig, TrainConfig
from rla_core.errors import ModelError
from rla_core.models.checkpoints import load_model
from rla_core.models.logprobs import scored_token_logps
from rla_core.models.packing import cut_micro_batches, lay_out, layout_rows, pack_rows
from rla_core.models.rows import TrainRow
from rla_core.models.sft import sft
from rla_core.models.update import plan_micro_batches, rl_update

LOGP_TOL = 1e-5

# Prompts and responses of different lengths, so packing has something to pack (tokens: 8, 19, 18, 5, 9).
TEXTS = [
    ("You are in a kitchen.", " take key"),
    ("Goal:", " open the chest now please and go north"),
    ("You are in a bedroom. There is a chest here. The chest is locked.", " go"),
    ("Is", " \\boxed{1}"),
    ("Exits: north, east.", " go east"),
]


# ---- hand-built layouts ------------------------------------------------------------------------------


def test_pack_rows_first_fit_decreasing() -> None:
    # Longest first into the first pack with room (cap 5): 5 -> A; 4 -> B; 3 -> C; 2 -> C (3+2); 1 -> B (4+1).
    assert pack_rows([5, 2, 3, 4, 1], pack_len=5) == [[0], [3, 4], [1, 2]]
    # Equal lengths keep row order; one row per pack when two never fit.
    assert pack_rows([3, 3, 3], pack_len=5) == [[0], [1], [2]]
    assert pack_rows([3, 3, 3], pack_len=9) == [[0, 1, 2]]
    with pytest.raises(ModelError, match="cannot fit packs of 4"):
        pack_rows([5, 1], pack_len=4)


def test_padded_layout_of_hand_built_rows() -> None:
    # Row 0: prompt [11, 12], response [13]; row 1: prompt [21], response [22, 23, 24]. Width 4.
    out = lay_out([[11, 12, 13], [21, 22, 23, 24]], [2, 1], pack_len=None)
    assert out.ids.tolist() == [[11, 12, 13, 0], [21, 22, 23, 24]]
    assert out.attention_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert out.positions is None and not out.packed
    # Row 0's one scored token (13, index 2) is predicted at position 1; row 1's (22, 23, 24) at 0, 1, 2.
    assert out.keep.long().tolist() == [[0, 1, 0, 0], [1, 1, 1, 0]]
    assert out.targets.tolist() == [13, 22, 23, 24]
    assert (out.row_of.tolist(), out.col_of.tolist(), out.widths) == ([0, 1, 1, 1], [0, 0, 1, 2], (1, 3))
    # 7 tokens in 2 × 4 = 8 positions: 1/8 padding.
    assert (out.tokens, out.slots, out.padding_share) == (7, 8, 0.125)


def test_packed_layout_boundaries_positions_and_tail() -> None:
    # Lengths 2, 4, 1, 3; packs of at most 4 (the longest row): FFD gives [1] | [3, 2] | [0] -> widths 4.
    seqs = [[10, 11], [20, 21, 22, 23], [30], [40, 41, 42]]
    out = lay_out(seqs, [1, 2, 1, 1], pack_len=4)
    assert out.ids.tolist() == [[20, 21, 22, 23], [30, 40, 41, 42], [10, 11, 0, 0]]
    # Positions restart at each row's first token; pack 2's tail (2 slots) is a segment of its own, 0, 1.
    assert out.positions.tolist() == [[0, 1, 2, 3], [0, 0, 1, 2], [0, 1, 0, 1]]
    assert out.attention_mask is None and out.packed
    # Row 1 scores 22, 23: predicted at its positions 1, 2 = slots 1, 2 of pack 0. Row 2 ([30]) scores from
    # token 1: nothing. Row 3 starts at slot 1 of pack 1 and scores 41, 42: its positions 0, 1 = slots 1, 2.
    # Row 0 scores 11: its position 0 = slot 0 of pack 2. Logits come back pack by pack.
    assert out.keep.long().tolist() == [[0, 1, 1, 0], [0, 1, 1, 0], [1, 0, 0, 0]]
    assert out.targets.tolist() == [22, 23, 41, 42, 11]
    assert out.row_of.tolist() == [1, 1, 3, 3, 0] and out.col_of.tolist() == [0, 1, 0, 1, 0]
    assert out.widths == (1, 2, 0, 2)
    # 10 tokens in 3 × 4 = 12 positions; padded, the same rows take 4 × 4 = 16 (6 of padding).
    assert (out.tokens, out.slots) == (10, 12)
    assert lay_out(seqs, [1, 2, 1, 1], pack_len=None).slots == 16
    # A variable-length kernel's single pack: everything end to end, no tail.
    one = lay_out(seqs, [1, 2, 1, 1], pack_len=10)
    assert one.positions.tolist() == [[0, 1, 0, 1, 2, 3, 0, 0, 1, 2]] and one.padding_share == 0.0
    with pytest.raises(ModelError, match=r"outside 1\.\.2"):
        lay_out([[1, 2]], [0], pack_len=None)


def test_layout_rows_scores_the_response_or_the_whole_row_and_keeps_images_padded() -> None:
    # Lengths 5, 2, 2: packs of 5 hold [5] and [2 + 2].
    rows = [TrainRow([1, 2, 3], [4, 5], 1.0), TrainRow([6], [7], -1.0), TrainRow([8], [9], 0.5)]
    response = layout_rows(rows, packed=True)
    assert response.targets.tolist() == [4, 5, 7, 9] and response.packed and response.slots == 10
    whole = layout_rows(rows, packed=True, score_prompt=True)
    assert whole.targets.tolist() == [2, 3, 4, 5, 7, 9]
    # An image row keeps the micro-batch right-padded (its model derives positions from the mask).
    with_image = [*rows[:2], TrainRow([8], [9], 0.5, ("screen.png",))]
    assert not layout_rows(with_image, packed=True).packed
    # Lengths 5 and 2 in packs of 5: each alone, which is the padded layout itself (rows in order).
    apart = layout_rows(rows[:2], packed=True)
    assert not apart.packed and apart.ids.tolist() == layout_rows(rows[:2], packed=False).ids.tolist()


def test_micro_batches_cut_by_tokens_and_plan_keeps_ranks_aligned() -> None:
    # Rows in order, at most 3 rows and 8 tokens: 3+4 | 2+1+1 (3 rows) | 9 (over budget: alone) | 5.
    assert cut_micro_batches([3, 4, 2, 1, 1, 9, 5], rows=3, max_tokens=8) == [[0, 1], [2, 3, 4], [5], [6]]
    # 6 rows, one optimizer step (G = 6), 2 ranks: rank 0 rows 0-2 (lengths 6, 6, 2), rank 1 rows 3-5
    # (1, 1, 1). Budget 8: rank 0 cuts 6 | 6+2 → 2 micro-batches, rank 1 cuts 1+1+1 → 1, plus one padding
    # micro-batch (row 0, weight 0) so both ranks run 2 forward/backward passes.
    lengths = [6, 6, 2, 1, 1, 1]
    assert plan_micro_batches(lengths, 6, 8, 0, 2, max_tokens=8) == [[[(0, 1.0)], [(1, 1.0), (2, 1.0)]]]
    assert plan_micro_batches(lengths, 6, 8, 1, 2, max_tokens=8) == [
        [[(3, 1.0), (4, 1.0), (5, 1.0)], [(0, 0.0)]]
    ]
    # Without a budget the cut is by rows only, as before packing existed.
    assert plan_micro_batches(lengths, 6, 2, 0, 1) == [
        [[(0, 1.0), (1, 1.0)], [(2, 1.0), (3, 1.0)], [(4, 1.0), (5, 1.0)]]
    ]


def test_the_docstring_examples_run() -> None:
    from rla_core.models import packing, update

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    plan = update.plan_micro_batches
    tests = [*finder.find(packing), *finder.find(plan, globs={"plan_micro_batches": plan})]
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False) == (0, sum(len(t.examples) for t in tests)) and len(tests) >= 4


# ---- the tiny model ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_and_rows(tiny_model: Path) -> tuple[Any, list[TrainRow]]:
    model, tokenizer = load_model(tiny_model)
    rows = [TrainRow(tokenizer(p)["input_ids"], tokenizer(r)["input_ids"], 1.0) for p, r in TEXTS]
    return model, rows


@pytest.fixture(params=["sdpa", "eager"])
def attention(request: pytest.FixtureRequest, model_and_rows: tuple[Any, list[TrainRow]]) -> Iterator[str]:
    """The tiny model with each CPU attention implementation (both build transformers' packed mask)."""
    model, _ = model_and_rows
    model.set_attn_implementation(request.param)
    yield request.param
    model.set_attn_implementation("sdpa")


def _logps(model: Any, rows: list[TrainRow], **layout: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return scored_token_logps(model, layout_rows(rows, **layout), rows, "cpu")


def test_packed_loss_and_gradients_equal_padded(
    model_and_rows: tuple[Any, list[TrainRow]], attention: str
) -> None:
    model, rows = model_and_rows
    assert layout_rows(rows, packed=True).slots < layout_rows(rows, packed=False).slots  # it does pack
    model.train()
    adv = torch.tensor([1.0, -1.0, 0.5, 1.0, -0.5])[:, None]
    results = []
    for layout in ({"packed": False}, {"packed": True}, {"packed": True, "varlen": True}):
        model.zero_grad(set_to_none=True)
        logps, mask = _logps(model, rows, **layout)
        # π_old a little off πθ so both clip branches and the k3 term carry gradient.
        old = (logps.detach() + 0.3 * torch.sin(torch.arange(logps.numel()).view_as(logps))) * mask
        pg, kl, _ = ppo_k3_loss(logps, old, adv, mask, 0.2)
        loss = (pg + 0.01 * kl).sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logps.detach(), mask, float(loss), grads))
    (ref_logps, ref_mask, ref_loss, ref_grads), *others = results
    largest = max(float(g.abs().max()) for g in ref_grads.values())
    for logps, mask, loss, grads in others:
        assert torch.equal(mask, ref_mask)
        assert float((logps - ref_logps).abs().max()) <= LOGP_TOL
        assert abs(loss - ref_loss) <= LOGP_TOL
        worst = max(float((grads[n] - ref_grads[n]).abs().max()) for n in ref_grads)
        assert set(grads) == set(ref_grads) and worst <= 1e-5 * largest, (worst, largest)


def _neighbour_gap(model: Any, rows: list[TrainRow], tamper: Any = None) -> float:
    """Max |Δ log-prob| of any row's response between scoring it alone and packed among the others."""
    model.eval()
    with torch.no_grad():
        alone = [_logps(model, [r], packed=False)[0][0] for r in rows]
        packed = layout_rows(rows, packed=True, varlen=True)  # one pack: every row beside every other
        if tamper is not None:
            packed = tamper(packed)
        together, _ = scored_token_logps(model, packed, rows, "cpu")
    return max(float((together[b, : len(a)] - a).abs().max()) for b, a in enumerate(alone))


def test_a_rows_logps_do_not_depend_on_the_rows_packed_beside_it(
    model_and_rows: tuple[Any, list[TrainRow]], attention: str
) -> None:
    model, rows = model_and_rows
    assert _neighbour_gap(model, rows) <= LOGP_TOL

    # The same check catches cross-row attention: positions that run on across rows (one long sequence to
    # transformers) let each row attend to the rows before it.
    def continuous(layout: Any) -> Any:
        return dataclasses.replace(layout, positions=torch.arange(layout.ids.shape[1])[None, :])

    assert _neighbour_gap(model, rows, continuous) > 100 * LOGP_TOL


def test_with_a_cache_transformers_would_not_see_the_packs(
    model_and_rows: tuple[Any, list[TrainRow]],
) -> None:
    """Why every training forward passes use_cache=False: with one, the same packed tensors are scored as
    one sequence (transformers skips its packed-row detection when a cache is in use)."""
    from trl.trainer.utils import selective_log_softmax

    model, rows = model_and_rows
    model.eval()
    layout = layout_rows(rows, packed=True, varlen=True)
    with torch.no_grad():
        ours, _ = scored_token_logps(model, layout, rows, "cpu")
        logits = model(
            input_ids=layout.ids, position_ids=layout.positions, use_cache=True, logits_to_keep=layout.keep
        ).logits
    cached = torch.zeros_like(ours).index_put(
        (layout.row_of, layout.col_of), selective_log_softmax(logits[None], layout.targets[None])[0]
    )
    assert float((cached - ours).abs().max()) > 100 * LOGP_TOL


ROWS = pl.DataFrame(
    {
        "prompt": [p for p, _ in TEXTS],
        "response": [r for _, r in TEXTS],
        "advantage": [1.0, -1.0, 0.5, 1.0, -0.5],
    }
)


def test_packed_update_equals_padded_update(tiny_model: Path, tmp_path: Path) -> None:
    """rl_update with packed micro-batches moves the weights as the padded one, and reports less padding.

    10 rows (TEXTS twice), 2 optimizer steps of 5 rows (19, 18, 9, 8, 5 tokens each), one micro-batch
    each: padded 5 × 19 positions, packed 4 × 19 (packs 19 | 18 | 9+8 | 5). AdamW's g/√v turns last-bit
    gradient differences into larger weight differences: measured max |Δ| 1.0e-6 = 0.05% of the largest
    update (2.0e-3); bound 1%. A row attending to its neighbour moves its log-probs by ~0.2 nats (above).
    """
    rows = pl.concat([ROWS, ROWS])
    padded_cfg = TrainConfig(lr=1e-3, update_per_step=2, micro_batch_size=8, max_tokens_per_micro_batch=None)
    packed_cfg = padded_cfg.model_copy(update={"max_tokens_per_micro_batch": 64})
    padded = rl_update(tiny_model, rows, cfg=padded_cfg, out_dir=tmp_path / "pad", seed=0, lora=LoraConfig())
    packed = rl_update(tiny_model, rows, cfg=packed_cfg, out_dir=tmp_path / "pack", seed=0, lora=LoraConfig())
    start, a, b = (
        load_file(p / "model.safetensors") for p in (tiny_model, tmp_path / "pad", tmp_path / "pack")
    )
    largest = max(float((a[k] - start[k]).abs().max()) for k in a)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert largest > 1e-4 and worst <= 0.01 * largest, (worst, largest)
    for key in ("loss", "pg_loss", "kl", "optimizer_steps", "grad_accum", "rows_used"):
        assert packed[key] == pytest.approx(padded[key], rel=1e-5, abs=1e-7), key
    assert 0.0 <= packed["padding_share"] < padded["padding_share"]


def test_packed_sft_equals_padded_sft(tiny_model: Path, tmp_path: Path) -> None:
    """SFT with each step cut into packed passes of at most 20 tokens gives the padded one-pass steps'
    loss and weights (the step's token mean is divided by the whole step's weight in every pass).

    Measured: losses equal to 2e-8 relative, weights max |Δ| 4.0e-5 = 0.33% of the largest change (1.2e-2,
    4 AdamW steps at lr 3e-3); bound 5%. Dividing each pass by its own weight instead of the step's moves
    the loss itself (a token mean of pass means)."""
    rows = ROWS.drop("advantage")
    kwargs: dict[str, Any] = {"epochs": 2, "lr": 3e-3, "seed": 0, "batch_size": 4, "prompt_weight": 0.25}
    padded = sft(tiny_model, rows, out_dir=tmp_path / "pad", **kwargs)
    packed = sft(tiny_model, rows, out_dir=tmp_path / "pack", max_tokens_per_micro_batch=20, **kwargs)
    start, a, b = (
        load_file(p / "model.safetensors") for p in (tiny_model, tmp_path / "pad", tmp_path / "pack")
    )
    largest = max(float((a[k] - start[k]).abs().max()) for k in a)
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    assert largest > 1e-3 and worst <= 0.05 * largest, (worst, largest)
    assert packed["loss"] == pytest.approx(padded["loss"], rel=1e-5)
    assert packed["first_loss"] == pytest.approx(padded["first_loss"], rel=1e-5)
    assert packed["padding_share"] < padded["padding_share"]
