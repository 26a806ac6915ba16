"""rla_core/models."""
