"""Prefect's ephemeral API server, recorded so that a SIGKILLed `rla` does not leave it running.

With no ``PREFECT_API_URL``, Prefect starts a local API server (a uvicorn child in this process's group)
at its first client call and stops it at exit. SIGKILL (the OOM killer, ``kill -9``) skips that stop, and
the server lives on, re-parented to init, holding a port, memory and its database. Before a run,
:func:`start_ephemeral_server` starts the very server Prefect would start (Prefect keeps one instance per
port, and its own client calls get this one) and records its pid with :func:`rla_core.procs.record_process`.
The next run reaps the server of an owner that is gone, as vLLM servers and training workers are reaped.

Example:
    >>> start_ephemeral_server()  # doctest: +SKIP  (no-op when PREFECT_API_URL names a real server)
"""

from __future__ import annotations

import atexit

from rla_core.procs import default_runtime_dir, record_process

KIND = "prefect-server"


def start_ephemeral_server() -> None:
    """Start (once per process) and record Prefect's ephemeral server, reaping those of dead owners first."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL

    if PREFECT_API_URL.value():
        return  # a real server: nothing runs here
    server = SubprocessASGIServer()  # the instance Prefect's get_client() starts and reuses
    if server.running:
        return
    server.start()
    if server.server_process is not None:
        pidfile = record_process(
            default_runtime_dir("prefect"),
            kind=KIND,
            pid=server.server_process.pid,
            what="Prefect API server",
        )
        atexit.register(pidfile.unlink, missing_ok=True)  # runs before Prefect's own stop (LIFO): harmless
