"""Per-row seeded sampling and stopping for in-process generation (:class:`~rla_core.models.generator.TransformersGenerator`).

A row's sample depends only on its own seed: :func:`sample_seed` derives the seed of sample j of a prompt,
:func:`step_uniforms` the row's counter-based uniforms, :class:`RowSampler` turns greedy decoding into
an exact draw from the tempered, top-p-truncated softmax with them, and :class:`StopCriterion` ends each
row at EOS or a stop string — so a row never depends on its batch neighbours
(docs/architecture.md#determinism-scope).

Example:
    >>> sample_seed(7, 0) == sample_seed(7, 0) != sample_seed(7, 1)
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch


def sample_seed(prompt_seed: int, sample_index: int) -> int:
    """The RNG seed of sample ``sample_index`` of a prompt seeded ``prompt_seed`` (63 bits, sha256)."""
    payload = f"{prompt_seed}:{sample_index}".encode()
    return int.from_bytes(hashlib.sha256(payload).digest()[:8], "big") >> 1


def step_uniforms(row_seed: int, steps: int) -> np.ndarray:
    """The uniforms in ``(0, 1]`` (float32) that a row seeded ``row_seed`` samples its first ``steps`` tokens with.

    Draw ``s`` is output ``s`` of Philox4x64 keyed by the seed (counter-based: it depends on the seed and
    ``s`` only, not on how many are drawn), its top 24 bits plus one over ``2**24``: exact in float32.

    Example:
        >>> bool((step_uniforms(7, 3) == step_uniforms(7, 5)[:3]).all())
        True
    """
    import numpy as np

    raw = np.random.Philox(key=row_seed).random_raw(steps)
    return (((raw >> np.uint64(40)) + np.uint64(1)) / 2**24).astype(np.float32)


class RowSampler:
    """Logits processor turning greedy decoding into per-row seeded sampling (inverse CDF, one uniform per row).

    Per generated token, row r draws ``u`` from its own counter-based stream: draw ``s`` (the step: tokens
    generated so far) of Philox4x64 keyed by ``row_seeds[r]`` (:func:`step_uniforms`), so a row's draws
    depend on its seed and the step only. With unnormalised weights ``w = exp((scores - max) / T)``
    (top-p: only the smallest prefix of the sorted weights whose mass reaches ``top_p``; the most likely
    token is always kept) and ``c`` their running sum, the row takes the first token with ``c_k >= u *
    c_last``: token k with probability ``w_k / sum(w)``, an exact sample from the tempered, top-p-truncated
    softmax. The returned scores are ``-inf`` except 0 at the sampled token, so greedy ``argmax`` takes it.

    Cost: the whole batch's uniforms are made on the host once per batch and copied to the device once;
    each step is a few batch-wide tensor ops (no per-row kernel, no host read). ``u`` lies in ``(0, 1]``,
    so ``u * c_last`` is positive and at most ``c_last``: a zero-weight token is never taken.
    """

    def __init__(
        self,
        row_seeds: Sequence[int],
        *,
        temperature: float,
        top_p: float,
        prompt_len: int,
        steps: int,
        device: torch.device,
    ) -> None:
        import torch

        self._temperature = temperature
        self._top_p = top_p
        self._prompt_len = prompt_len
        import numpy as np

        table = np.stack([step_uniforms(s, steps) for s in row_seeds])
        self._uniforms = torch.from_numpy(table).to(device)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        step = input_ids.shape[1] - self._prompt_len
        u = self._uniforms[:, step : step + 1].to(scores.device)
        logits = scores.float()
        # exp((x - max) / T): the top token weighs 1, so every row's total is at least 1.
        weights = (logits - logits.amax(dim=-1, keepdim=True)).mul_(1.0 / self._temperature).exp_()
        if self._top_p < 1.0:
            weights, order = torch.sort(weights, dim=-1, descending=True)
            cumulative = weights.cumsum(dim=-1)
            # Mass strictly before each token: tokens are kept while that is below top_p of the total.
            kept = ((cumulative - weights) < self._top_p * cumulative[:, -1:]).sum(dim=-1, keepdim=True)
            total = cumulative.gather(-1, kept - 1)
            picked = torch.searchsorted(cumulative, u * total).clamp_(max=kept - 1)
            picked = order.gather(-1, picked)
        else:
            cumulative = weights.cumsum_(dim=-1)
            picked = torch.searchsorted(cumulative, u * cumulative[:, -1:])
        return torch.full_like(logits, float("-inf")).scatter_(-1, picked, 0.0)


class StopCriterion:
    """Per-sequence stop at EOS or at a stop string, checked on the device; records when each sequence ended.

    EOS is a device-side comparison (no host read). Stop strings need decoded text: then the last
    ``window`` tokens of the batch come to the host in one read per step and only the unfinished rows'
    tails are decoded, so the cost per step is bounded by ``rows x window`` tokens.
    """

    def __init__(
        self, tokenizer: Any, *, prompt_len: int, stops: Sequence[str], eos_ids: list[int], rows: int,
        device: torch.device,
    ) -> None:  # fmt: skip
        import torch

        self._tok = tokenizer
        self._prompt_len = prompt_len
        self._stops = [s for s in stops if s]
        self._eos = torch.tensor(eos_ids, dtype=torch.long, device=device)
        # A stop string of k characters spans at most k tokens (+ slack for partial UTF-8 bytes).
        self._window = max((len(s) for s in self._stops), default=0) + 4
        self._finished_at = torch.full((rows,), -1, dtype=torch.long, device=device)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        import torch

        n_new = input_ids.shape[1] - self._prompt_len
        done = self._finished_at >= 0
        stopped = torch.isin(input_ids[:, -1], self._eos)
        if self._stops:
            tails = input_ids[:, -min(self._window, n_new) :]
            # One host read: whether each row is done, then its tail.
            rows = torch.cat([done.unsqueeze(1).to(tails.dtype), tails], dim=1).tolist()
            hits = [
                r for r, (was_done, *tail) in enumerate(rows)
                if not was_done and any(s in self._tok.decode(tail, skip_special_tokens=True) for s in self._stops)
            ]  # fmt: skip
            if hits:
                stopped[torch.tensor(hits, device=stopped.device)] = True
        self._finished_at = torch.where(stopped & ~done, n_new, self._finished_at)
        return done | stopped

    def finished_at(self) -> list[int | None]:
        """Per row, the number of new tokens it used when it stopped (None: it ran to the length limit)."""
        return [None if n < 0 else int(n) for n in self._finished_at.tolist()]


def eos_ids(configured: int | list[int] | None, tokenizer: Any) -> list[int]:
    """The ids that end a generation: ``configured`` (a generation config's ``eos_token_id``: one id or a
    list), else the tokenizer's EOS; both backends' generators and the recording endpoint read them so."""
    eos = configured if configured is not None else tokenizer.eos_token_id
    ids = eos if isinstance(eos, list) else [eos]
    return [int(i) for i in ids if i is not None]
