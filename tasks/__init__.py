"""tasks: one Prefect task per stage of the RLAnything loop (docs/architecture.md#the-design-contract); the machinery is tasks/stage.py.

Importing it changes nothing in the process: entry points apply the process defaults
(:func:`flows.process_env.apply_process_defaults`) before Prefect is imported.
"""
