"""rla_core/envs."""
