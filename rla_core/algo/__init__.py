"""rla_core/algo."""
