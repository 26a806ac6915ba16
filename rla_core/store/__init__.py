"""rla_core/store."""
