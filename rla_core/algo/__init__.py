"""Pure algorithm modules of RLAnything: frames and typed config in, new frames out; no I/O.

* :mod:`rla_core.algo.parsing` — judge scores, action indices, JSON, code blocks, unit tests (spec §5)
* :mod:`rla_core.algo.labels` — integrated policy reward and RM consistency reward (spec §2.1-2.2)
* :mod:`rla_core.algo.coding_rewards` — coding policy / unit-test rewards and metrics (spec §2.3-2.5)
* :mod:`rla_core.algo.adaptation` — rewrite direction and acceptance rule (spec §3)
* :mod:`rla_core.algo.registry` — the append-only task registry (spec §3, docs/architecture.md#the-design-contract)
"""
