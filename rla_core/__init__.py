"""rla_core: the RLAnything library — pure algorithm modules plus adapters. Never imports Prefect or MLflow."""

__version__ = "0.1.0"
