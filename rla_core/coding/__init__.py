"""rla_core/coding: coding tasks, prompts, unit tests, problem rewriting, warm-start demos."""
