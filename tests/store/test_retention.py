"""Checkpoint retention's decision (rla_core.store.retention) by hand, and the storage keys' validation."""

from __future__ import annotations

import pytest

from rla_core.config import load_config
from rla_core.errors import ConfigError
from rla_core.store.retention import kept_iterations, prunable_iterations


def test_default_keeps_every_iteration() -> None:
    # keep_last null: nothing is pruned, whatever the iteration.
    assert prunable_iterations(current=50, keep_last=None, keep_every=None) == ()
    assert kept_iterations(current=3, keep_last=None, keep_every=None) == {0, 1, 2, 3}


def test_keep_last_keeps_the_window_and_the_checkpoint_it_starts_from() -> None:
    # current=5, k=2: the window is iterations 4 and 5; iteration 4 re-runs from iteration 3's
    # checkpoints, so 3 stays too; 0 is the warm start. Pruned: 1 and 2.
    assert kept_iterations(current=5, keep_last=2, keep_every=None) == {0, 3, 4, 5}
    assert prunable_iterations(current=5, keep_last=2, keep_every=None) == (1, 2)
    # k=1 at current=3: window {3}, plus 2 it starts from, plus 0. Pruned: 1.
    assert prunable_iterations(current=3, keep_last=1, keep_every=None) == (1,)


def test_early_iterations_prune_nothing() -> None:
    # current=2, k=1: kept {0, 1, 2} (1 is what iteration 2 starts from): nothing to prune yet.
    assert prunable_iterations(current=2, keep_last=1, keep_every=None) == ()
    # current=1, k=5: the window reaches below 0; max(1-5, 0)=0 → kept {0, 1}.
    assert prunable_iterations(current=1, keep_last=5, keep_every=None) == ()


def test_keep_every_adds_the_multiples() -> None:
    # current=10, k=2, n=4: window {9, 10} + 8 (start of the window) + multiples {4, 8} + 0.
    # Pruned: 1, 2, 3, 5, 6, 7.
    assert kept_iterations(current=10, keep_last=2, keep_every=4) == {0, 4, 8, 9, 10}
    assert prunable_iterations(current=10, keep_last=2, keep_every=4) == (1, 2, 3, 5, 6, 7)


def test_the_warm_start_is_never_pruned() -> None:
    for current in range(0, 30):
        for k in (1, 2, 7):
            for n in (None, 1, 3):
                assert 0 not in prunable_iterations(current=current, keep_last=k, keep_every=n)


def test_pruning_is_monotone_in_the_current_iteration() -> None:
    # What may go after iteration c may go after every later one: a resume never needs an undo.
    for k in (1, 2, 3):
        for n in (None, 2, 5):
            for c in range(0, 20):
                now = set(prunable_iterations(current=c, keep_last=k, keep_every=n))
                later = set(prunable_iterations(current=c + 1, keep_last=k, keep_every=n))
                assert now <= later


def test_storage_keys_are_validated_with_clear_errors() -> None:
    assert load_config(overrides=["storage.keep_last=2", "storage.keep_every=5"]).storage.keep_last == 2
    with pytest.raises(ConfigError, match=r"storage\.keep_last=0: must be at least 1; null keeps every"):
        load_config(overrides=["storage.keep_last=0"])
    with pytest.raises(ConfigError, match=r"storage\.keep_every=-1: must be at least 1"):
        load_config(overrides=["storage.keep_last=1", "storage.keep_every=-1"])
    with pytest.raises(
        ConfigError, match=r"storage\.keep_every=3 thins what keep_last prunes.*set storage\.keep_last"
    ):
        load_config(overrides=["storage.keep_every=3"])


def test_the_retired_key_stays_retired() -> None:
    # training.keep_checkpoints once existed unimplemented; retention lives under storage.
    with pytest.raises(ConfigError, match=r"unknown key 'training\.keep_checkpoints'"):
        load_config(overrides=["training.keep_checkpoints=2"])
