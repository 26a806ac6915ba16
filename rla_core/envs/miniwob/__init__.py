"""The GUI setting: MiniWoB++ web tasks in headless Chromium (OSWorld stand-in, spec §1.3).

See :mod:`.env` (Environment), :mod:`.pool` (browsers), :mod:`.dom` (text observations and actions),
:mod:`.solvers` (scripted experts), :mod:`.tasks` (specs and families), :mod:`.rewriter` (rewrites).
"""
