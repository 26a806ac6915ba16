"""ALFWorld-style household games: ALFRED-domain problems generated offline, played through TextWorld's PDDL engine.

These are NOT the published ALFWorld games (those come from ALFRED trajectories and need a download);
they are games of the same domain, grammar and task types, generated from the floor plans shipped in
the ``alfworld`` wheel. Published ``game.tw-pddl`` files load too (:mod:`.published`).

Modules: :mod:`.assets` (shipped data, floor-plan completion), :mod:`.spec` (task specs),
:mod:`.generator` (spec -> game), :mod:`.pddl` (problem text), :mod:`.env` (the Environment adapter,
expert labels by state), :mod:`.published` (loader), :mod:`.rewriter` (two-token and parametric rewrites).
"""
