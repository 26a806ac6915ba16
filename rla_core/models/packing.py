"""Where a micro-batch's rows sit in the tensors of one forward pass: right-padded, or packed.

Every trainer forward pass (:mod:`rla_core.models.logprobs`) takes a :class:`Layout` of its rows:

- **padded** (``pack_len=None``): row i is tensor row i, right-padded with 0 to the longest row, with an
  attention mask over its tokens. Every row costs as much as the longest one.
- **packed** (``pack_len=L``): rows laid end to end in *packs* (tensor rows) of at most L tokens
  (:func:`pack_rows`), ``position_ids`` restarting at 0 at each row and no attention mask. Restarting
  positions are how transformers recognises packed rows (``masking_utils.find_packed_sequence_indices``,
  and the flash-attention path's ``_is_packed_sequence``; checked against transformers 5.24): its mask
  builder then lets a token attend only to earlier tokens of its own row. That detection runs only when the
  forward has no cache, so every training forward passes ``use_cache=False`` — with a cache, packed rows
  would silently attend across their boundaries. A pack shorter than the longest pack is filled with id 0
  at positions 0, 1, … (a segment of its own, after every real token, so causality keeps it out of every
  row's attention).

Why packs are bounded: SDPA and eager attention compute the full L×L square of each pack (masked, not
skipped), so packs about as long as the micro-batch's longest row keep attention's cost at what the padded
layout pays per row. A variable-length kernel (flash-attention) computes each row's own square only, so
there one pack of every token is best (``pack_len`` = the micro-batch's tokens; transformers' flash path
reads packing from the positions only with one tensor row). Where no two rows share a pack (rows of similar
lengths), the packed layout would be the padded one with other masks: :func:`lay_out` returns the padded
layout itself, so packing never costs anything where it saves nothing.

In both layouts only the positions whose next token is scored get logits: ``keep`` is passed as
transformers' ``logits_to_keep`` (a boolean (P, L) mask: the lm_head runs on those K positions and the
logits come back flattened to (K, vocabulary), in ``keep``'s row-major order). A row's scored tokens are
its tokens from ``first_scored`` on: the response (RL update, plain SFT) or everything after the first
token (SFT that also learns the prompt). ``targets[k]``, ``row_of[k]`` and ``col_of[k]`` say, for the k-th
kept position, which token it predicts, which row that is and which of the row's scored tokens.

This module only lays rows out (torch tensors on the CPU, no model): the forward pass that reads a layout
is :func:`rla_core.models.logprobs.scored_token_logps`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rla_core.errors import ModelError
from rla_core.models.rows import TrainRow


def pack_rows(lengths: Sequence[int], *, pack_len: int) -> list[list[int]]:
    """Row indices per pack: first-fit decreasing into packs of at most ``pack_len`` tokens.

    Rows are taken longest first (ties in row order), each into the first pack it fits; packs are listed
    in the order they were opened and hold their rows in row order. Deterministic: the same lengths give
    the same packs on every rank and in the π_old pass.

    >>> pack_rows([5, 2, 3, 4, 1], pack_len=5)  # 5 | 4+1 | 3+2
    [[0], [3, 4], [1, 2]]
    """
    if any(n > pack_len for n in lengths):
        raise ModelError(
            f"a row of {max(lengths)} tokens cannot fit packs of {pack_len}: pack_len >= longest"
        )
    packs: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        slot = next((p for p, free in enumerate(room) if free >= lengths[i]), None)
        if slot is None:
            packs.append([])
            room.append(pack_len)
            slot = len(packs) - 1
        packs[slot].append(i)
        room[slot] -= lengths[i]
    return [sorted(p) for p in packs]


@dataclass(frozen=True)
class Layout:
    """One micro-batch's rows in the tensors of a forward pass (see the module docstring).

    P tensor rows of L positions; K scored positions in all; B rows, row b with ``widths[b]`` scored tokens.
    """

    ids: Any  # (P, L) long: token ids, 0 after a row's (padded) or a pack's (packed) last token
    positions: Any | None  # (P, L) long, packed only: 0, 1, … from each row's first token
    attention_mask: Any | None  # (P, L) long, padded only: 1 on tokens, 0 on padding
    keep: Any  # (P, L) bool: the positions whose logits are computed (logits_to_keep)
    targets: Any  # (K,) long: the token each kept position predicts, in keep's row-major order
    row_of: Any  # (K,) long: the row (0..B-1) of each kept position
    col_of: Any  # (K,) long: which of its row's scored tokens (0..widths[row]-1) it predicts
    widths: tuple[int, ...]  # (B,) scored tokens per row
    tokens: int  # Σ row lengths: the tokens the forward pass is for
    slots: int  # P·L: the positions it computes

    @property
    def packed(self) -> bool:
        return self.positions is not None

    @property
    def padding_share(self) -> float:
        """Share of the computed positions that hold no row's token (1 − tokens / slots)."""
        return 1.0 - self.tokens / self.slots


def lay_out(seqs: Sequence[Sequence[int]], first_scored: Sequence[int], *, pack_len: int | None) -> Layout:
    """The :class:`Layout` of token rows ``seqs`` whose tokens from ``first_scored[b]`` on are scored.

    ``pack_len``: None lays the rows out right-padded; an int packs them (:func:`pack_rows`) into packs of
    at most that many tokens (at least the longest row) — unless no two rows share a pack, which is the
    padded layout (one row per tensor row) and is returned as that. ``1 <= first_scored[b] <= len(seqs[b])``: token 0
    has no position before it to predict it, and a row may have nothing scored.

    Example: rows [7, 8, 9] (prompt 7, response 8 9) and [5, 6] (prompt 5, response 6), packed into one
    pack of 5: ids [[7, 8, 9, 5, 6]], positions [[0, 1, 2, 0, 1]]; the kept positions are 0 and 1 (they
    predict 8 and 9) and 3 (it predicts 6).

        >>> out = lay_out([[7, 8, 9], [5, 6]], [1, 1], pack_len=5)
        >>> out.positions.tolist(), out.keep.long().tolist(), out.targets.tolist()
        ([[0, 1, 2, 0, 1]], [[1, 1, 0, 1, 0]], [8, 9, 6])
        >>> out.row_of.tolist(), out.col_of.tolist(), out.widths, out.padding_share
        ([0, 0, 1], [0, 1, 0], (2, 1), 0.0)
    """
    import torch

    if len(seqs) != len(first_scored) or not seqs:
        raise ModelError(f"lay_out needs one first_scored per row and at least one row, got {len(seqs)} rows")
    for b, (seq, first) in enumerate(zip(seqs, first_scored, strict=True)):
        if not 1 <= first <= len(seq):
            raise ModelError(f"row {b}: first scored token {first} outside 1..{len(seq)}")
    lengths = [len(s) for s in seqs]
    # Each tensor row as a list of (row, offset) placements, in order along the tensor row.
    rows_of = [[b] for b in range(len(seqs))]
    if pack_len is not None:
        rows_of = pack_rows(lengths, pack_len=pack_len)
        if all(len(pack) == 1 for pack in rows_of):
            # No two rows share a pack: the padded layout is the same tensors (rows in order), and the
            # padding-mask path transformers takes for it; nothing to gain from packing.
            rows_of, pack_len = [[b] for b in range(len(seqs))], None
    width = max(sum(lengths[b] for b in pack) for pack in rows_of)
    ids = [[0] * width for _ in rows_of]
    positions = [[0] * width for _ in rows_of]
    attention = [[0] * width for _ in rows_of]
    keep = [[False] * width for _ in rows_of]
    targets: list[int] = []
    row_of: list[int] = []
    col_of: list[int] = []
    for p, pack in enumerate(rows_of):
        at = 0
        for b in pack:
            seq, first = seqs[b], first_scored[b]
            ids[p][at : at + len(seq)] = seq
            positions[p][at : at + len(seq)] = range(len(seq))
            attention[p][at : at + len(seq)] = [1] * len(seq)
            for j in range(first - 1, len(seq) - 1):  # position j predicts token j + 1
                keep[p][at + j] = True
            # The logits come back in keep's row-major order: pack by pack, row by row along the pack.
            targets += seq[first:]
            row_of += [b] * (len(seq) - first)
            col_of += range(len(seq) - first)
            at += len(seq)
        positions[p][at:] = range(width - at)  # the tail: a segment of its own (see the module docstring)
    long = torch.long
    return Layout(
        ids=torch.tensor(ids, dtype=long),
        positions=None if pack_len is None else torch.tensor(positions, dtype=long),
        attention_mask=torch.tensor(attention, dtype=long) if pack_len is None else None,
        keep=torch.tensor(keep, dtype=torch.bool),
        targets=torch.tensor(targets, dtype=long),
        row_of=torch.tensor(row_of, dtype=long),
        col_of=torch.tensor(col_of, dtype=long),
        widths=tuple(len(s) - f for s, f in zip(seqs, first_scored, strict=True)),
        tokens=sum(lengths),
        slots=len(rows_of) * width,
    )


def layout_rows(
    batch: Sequence[TrainRow], *, packed: bool, varlen: bool = False, score_prompt: bool = False
) -> Layout:
    """The layout of a micro-batch of :class:`TrainRow` (prompt + response tokens).

    ``packed``: packs as long as the longest row, or with ``varlen`` (a variable-length attention kernel,
    :func:`varlen_attention`) one pack of every row; otherwise right-padded. A micro-batch holding an image
    row stays right-padded: a vision-language model derives its (3-D, multimodal) positions from the
    attention mask and the images itself, so it cannot be given restarting positions. ``score_prompt``
    scores every token after the first (SFT that also learns the prompt), else the response only.
    """
    seqs = [r.prompt_ids + r.response_ids for r in batch]
    first = [1 if score_prompt else len(r.prompt_ids) for r in batch]
    pack_len = None
    if packed and not any(r.images for r in batch):
        pack_len = sum(len(s) for s in seqs) if varlen else max(len(s) for s in seqs)
    return lay_out(seqs, first, pack_len=pack_len)


def varlen_attention(model: Any) -> bool:
    """Whether ``model`` (unwrapped: a transformers model or a peft one) attends with a variable-length
    kernel (a flash-attention implementation), which computes each packed row's own square only."""
    from transformers.utils.generic import is_flash_attention_requested

    config = getattr(model, "config", None)
    return config is not None and bool(is_flash_attention_requested(config))


def cut_micro_batches(lengths: Sequence[int], *, rows: int, max_tokens: int | None) -> list[list[int]]:
    """Consecutive runs of row indices 0..len(lengths)-1: at most ``rows`` rows and, with ``max_tokens``,
    at most that many tokens each (a row longer than ``max_tokens`` runs alone). In order, greedy.

    >>> cut_micro_batches([3, 4, 2, 9, 1], rows=8, max_tokens=8)  # 3+4 | 2 | 9 | 1
    [[0, 1], [2], [3], [4]]
    >>> cut_micro_batches([3, 4, 2, 9, 1], rows=2, max_tokens=None)
    [[0, 1], [2, 3], [4]]
    """
    out: list[list[int]] = []
    used = 0
    for i, n in enumerate(lengths):
        full = bool(out) and (len(out[-1]) == rows or (max_tokens is not None and used + n > max_tokens))
        if not out or full:
            out.append([])
            used = 0
        out[-1].append(i)
        used += n
    return out
