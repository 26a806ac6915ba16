"""Checkpoint retention: which iterations' checkpoints a run may delete (docs/operations.md#checkpoint-retention).

Every iteration writes a policy and a reward-model checkpoint (fp32: about 28 GB per role at 7B), and
nothing in the store is deleted by default. With ``storage.keep_last = k`` the last ``k`` iterations stay
re-runnable from any of their stages, so their checkpoints *and the ones their earliest iteration started
from* (iteration ``current - k``) are kept; ``storage.keep_every = n`` also keeps iterations ``n, 2n, …``.
Iteration 0 (the warm start every later iteration and every arm of a study descends from) is never pruned.

Pure: the caller lists what to prune with :func:`prunable_iterations` and does the deleting.
"""

from __future__ import annotations


def kept_iterations(*, current: int, keep_last: int | None, keep_every: int | None) -> frozenset[int]:
    """Iterations ``0..current`` whose checkpoints stay, once iteration ``current`` has committed.

    ``keep_last`` None keeps every iteration (the default; ``keep_every`` alone is refused by the config).

    >>> sorted(kept_iterations(current=7, keep_last=2, keep_every=3))
    [0, 3, 5, 6, 7]
    """
    if keep_last is None:
        return frozenset(range(current + 1))
    # The window's earliest iteration (current - keep_last + 1) re-runs from the checkpoints of the one
    # before it, so that one stays too.
    window = range(max(current - keep_last, 0), current + 1)
    every = range(keep_every, current + 1, keep_every) if keep_every is not None else range(0)
    return frozenset({0, *window, *every})


def prunable_iterations(*, current: int, keep_last: int | None, keep_every: int | None) -> tuple[int, ...]:
    """Iterations ``1..current`` whose checkpoints may be deleted once iteration ``current`` has committed.

    Monotone in ``current``: what may go at ``current`` may go at every later iteration too, so pruning
    after each iteration (and again on a resume that passes old iterations) never needs an undo.

    >>> prunable_iterations(current=7, keep_last=2, keep_every=3)
    (1, 2, 4)
    """
    kept = kept_iterations(current=current, keep_last=keep_last, keep_every=keep_every)
    return tuple(it for it in range(1, current + 1) if it not in kept)
