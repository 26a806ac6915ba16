"""The executor: work cut into shards, each run on its own Ray actor (``cluster.*``, docs/cluster.md).

* :mod:`rla_core.cluster.shards` — contiguous shards of a stage's canonical order (pure);
* :mod:`rla_core.cluster.ray_session` — one Ray connection per process, :func:`~rla_core.cluster.ray_session.run_shards`
  (one actor per shard, resources from a typed :class:`~rla_core.cluster.ray_session.ShardRequest`) and
  :func:`~rla_core.cluster.ray_session.run_batches` (sandboxed executions);
* :mod:`rla_core.cluster.ray_train` — multi-process updates as Ray Train workers.

It knows no setting and no generator: what a shard does is the caller's function
(:mod:`rla_core.dispatch` for the generating stages).
"""
