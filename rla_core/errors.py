"""Typed errors of rlanything.

Every error says what was wrong, where, and how to fix it. The CLI prints ``str(error)`` as one line.
"""

from __future__ import annotations


class RlaError(Exception):
    """Base class of every error rlanything raises on purpose."""


class ConfigError(RlaError):
    """The run configuration is invalid (unknown key, wrong type, out-of-range value)."""


class SchemaError(RlaError):
    """An artifact frame does not match its declared schema."""


class ArtifactError(RlaError):
    """An artifact is missing, corrupt, or cannot be written."""


class RegistryError(RlaError):
    """A task-registry operation is invalid (unknown slot, wrong status transition)."""


class ParseError(RlaError):
    """A model output could not be parsed where a valid value is mandatory."""


class ModelError(RlaError):
    """A model or checkpoint cannot be loaded, or a generation/training request is invalid."""


class EnvironmentSpecError(RlaError):
    """A task spec cannot be turned into a playable environment."""


class SandboxError(RlaError):
    """The code sandbox could not be set up (not: the program under test failed)."""


class RunLockedError(RlaError):
    """Another live process holds the run's lock."""


class RunNotFoundError(RlaError):
    """No run with that id exists under the artifact root."""


class UsageError(RlaError):
    """A command was called with arguments that do not go together (or without one it needs)."""


class BrowserError(RlaError):
    """A headless browser (GUI setting) could not be started, or a call to it failed or timed out."""


class BrowserTimeoutError(BrowserError):
    """A call to a headless browser exceeded its timeout (the browser was killed)."""


class BrowserStartError(BrowserError):
    """A headless browser could not be started at all (missing or broken binary, driver mismatch)."""


class ProcessError(RlaError):
    """A helper process (server, training worker) failed to start, died before it was ready, or failed."""


class ClusterError(RlaError):
    """A Ray cluster could not be reached, had too few resources, or lost a shard with its worker or node."""


class EnvironmentFault(RlaError):
    """Our machinery failed inside one episode (a desktop, X server, browser or sandbox died or hung).

    Raised by an environment's episode; the rollout runner records the episode as ``env_error`` with
    ``kind`` (a :class:`~rla_core.envs.base.EnvErrorKind` value) and this one-line message, and replays it
    on a fresh environment (docs/environment-errors.md). Never raised for what the policy did.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = str(kind)
        self.message = " ".join(message.split())[:500]  # one line, bounded


class DemonstrationError(RlaError):
    """The warm start could not play a task's demonstration or random episode, even after its replays."""


class EnvErrorShareError(RlaError):
    """Too many episodes of a stage ended in ``env_error`` after their retries: the cluster is broken."""


class PreflightError(RlaError):
    """The preflight found inputs a run would fail on; ``problems`` holds one line per problem.

    Raised before anything of a run is written (``rla_core.preflight``); the CLI prints every line and
    exits with :data:`PREFLIGHT_EXIT_CODE`.
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems) or "preflight failed")


# The exit code of `rla run`, `rla resume`, `rla study` and `rla config check` when the preflight fails
# (docs/operations.md): distinct from 1 (any other error) so a scheduler can tell "fix the inputs" apart.
PREFLIGHT_EXIT_CODE = 3


class CheckpointPrunedError(ArtifactError):
    """A command needs a checkpoint that checkpoint retention (``storage.keep_last``) has deleted."""
