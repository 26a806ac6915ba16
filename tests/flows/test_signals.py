"""How `rla` takes signals (flows/signals.py), each in a fresh interpreter running the CLI's command guard."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _guarded(body: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``waiting()``, defined by ``body``, under the CLI's ``_guard`` in a new interpreter."""
    program = (
        f"import os, signal, time, weakref, typer\nfrom flows.cli import _guard\n{body}\n"
        "try:\n    _guard(waiting)\nexcept typer.Exit as exc:  # what typer makes of it in the CLI\n"
        "    raise SystemExit(exc.exit_code)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", program], cwd=tmp_path, env=os.environ | {"PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_sigusr1_writes_every_threads_stack_and_the_command_goes_on(tmp_path: Path) -> None:
    done = _guarded(
        "def waiting():\n"
        "    os.kill(os.getpid(), signal.SIGUSR1)\n"
        "    time.sleep(0.2)\n"
        "    print('went on')\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "went on"
    assert "Current thread" in done.stderr and "in waiting" in done.stderr, done.stderr


def test_sigterm_that_lands_in_a_weakref_callback_still_stops_the_command(tmp_path: Path) -> None:
    """Python ignores an exception raised in a weakref callback; the signal is delivered again instead of
    lost (a test-preset run once finished with exit code 0 after such a SIGTERM)."""
    done = _guarded(
        "class Thing:\n"
        "    pass\n"
        "def callback(_ref):\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.05)  # the handler runs here, inside the callback, and its exception is ignored\n"
        "def waiting():\n"
        "    thing = Thing()\n"
        "    ref = weakref.ref(thing, callback)\n"
        "    del thing  # the callback runs now\n"
        "    for _ in range(40):\n"
        "        time.sleep(0.05)\n"
        "    print('went on', ref)\n",
        tmp_path,
    )
    assert done.returncode == 143, (done.stdout, done.stderr)
    assert "went on" not in done.stdout
    assert "SIGTERM arrived inside" in done.stderr and "delivering it again" in done.stderr, done.stderr
    assert "terminated (SIGTERM)" in done.stderr
    assert "still waiting for threads" not in done.stderr  # nothing held the exit: no forced end


def test_prefects_termination_signal_swallowed_in_a_callback_is_delivered_again(tmp_path: Path) -> None:
    """Inside a flow, Prefect's SIGTERM bridge is the handler and raises its own TerminationSignal."""
    done = _guarded(
        "from prefect.exceptions import TerminationSignal\n"
        "class Thing:\n"
        "    pass\n"
        "def bridge(signum, _frame):\n"
        "    raise TerminationSignal(signum)\n"
        "def callback(_ref):\n"
        "    signal.signal(signal.SIGTERM, bridge)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.05)\n"
        "def waiting():\n"
        "    thing = Thing()\n"
        "    ref = weakref.ref(thing, callback)\n"
        "    try:\n"
        "        del thing\n"
        "        for _ in range(40):\n"
        "            time.sleep(0.05)\n"
        "    except TerminationSignal as exc:\n"
        "        print('caught', exc.signal)\n"
        "        return\n"
        "    print('went on', ref)\n",
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "caught 15", (done.stdout, done.stderr)


def test_exit_after_sigterm_is_bounded_when_a_thread_pool_worker_can_never_be_woken(tmp_path: Path) -> None:
    """A SIGTERM raised inside ThreadPoolExecutor's thread start leaves a worker the executor never
    registered for shutdown, and Python's exit joins it for ever (a run hung after its SIGTERM error). Here
    that state is made on purpose: the worker is taken out of the executor's shutdown registry. The exit
    takes the grace period (1 s here), writes the stacks, still runs the atexit handlers and exits 143."""
    started = time.monotonic()
    done = _guarded(
        "import atexit, concurrent.futures.thread as cft, flows.signals\n"
        "flows.signals.SHUTDOWN_GRACE_S = 1.0\n"
        "atexit.register(lambda: print('atexit handler ran', flush=True))\n"
        "pools = []  # the executor stays alive, as Prefect's does (collecting it would wake its worker)\n"
        "def waiting():\n"
        "    pool = cft.ThreadPoolExecutor(max_workers=1)\n"
        "    pools.append(pool)\n"
        "    pool.submit(lambda: None).result()\n"
        "    cft._threads_queues.clear()  # as if the signal had landed between t.start() and the registration\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(5)\n"
        "    print('went on')\n",
        tmp_path,
    )
    seconds = time.monotonic() - started
    assert done.returncode == 143, (done.stdout, done.stderr)
    assert "went on" not in done.stdout and "atexit handler ran" in done.stdout, done.stdout
    assert "terminated (SIGTERM)" in done.stderr
    assert "still waiting for threads 1 s after the command stopped" in done.stderr, done.stderr
    assert "concurrent/futures/thread.py" in done.stderr  # the stack of the worker that held the exit
    assert seconds < 50, seconds  # without the bound: the 60 s subprocess timeout
