"""OSWorld tasks in the loop: ``gui.engine: osworld`` on the local desktops of :mod:`rla_core.envs.desktop`.

:mod:`~rla_core.envs.osworld.tasks` reads task sources (an OSWorld ``evaluation_examples`` meta list, JSONL) into
the RLAnything adaptive format (``current_task``, ``task_template``, ``evaluator_list``; spec §3.3) and checks
them; :mod:`~rla_core.envs.osworld.observe` turns the accessibility tree into the text a policy reads and the
numbered candidate actions into pyautogui code; :mod:`~rla_core.envs.osworld.env` is the
:class:`~rla_core.envs.base.Environment` over OSWorld's own ``desktop_env.DesktopEnv``;
:mod:`~rla_core.envs.osworld.rewriter` the adaptation (evaluator key and hints, never a new task);
:mod:`~rla_core.envs.osworld.cache` fills ``desktop_env``'s file cache. See docs/osworld.md.
"""
