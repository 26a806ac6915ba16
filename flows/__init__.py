"""flows: the training-loop flows and the `rla` CLI (entry points apply flows.process_env first)."""
