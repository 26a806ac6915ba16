"""rla_core/sandbox."""
