"""A pool of N isolated local desktops, one episode per desktop at a time.

Like the browser pool (:mod:`rla_core.envs.miniwob.pool`), but a desktop cannot be shared between episodes
(tabs can): :meth:`DesktopPool.acquire` hands out a free desktop, waiting when all ``size`` are busy, and
:meth:`DesktopPool.release` resets it (fresh home, restarted session) before the next episode gets it.
Desktops start in parallel (starting is mostly waiting for Xvfb and the server).

No orphaned processes or state: each desktop records its process group in a pidfile under ``runtime_dir``
(:mod:`rla_core.procs`) and its state directory names its owner; :meth:`close` (context manager exit and an
``atexit`` hook) stops them all, and after SIGKILL of the owner the next pool or desktop started on the same
``runtime_dir`` reaps them (:func:`~rla_core.envs.desktop.desktop.reap_stale_desktops`).

Example:
    >>> with DesktopPool(DesktopOptions(size=2)) as pool:  # doctest: +SKIP
    ...     with pool.desktop() as d:
    ...         env = make_env(d, stop_on_close=False)
"""

from __future__ import annotations

import atexit
import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rla_core import procs
from rla_core.envs.desktop.desktop import Desktop
from rla_core.errors import ProcessError

MIB_PER_DESKTOP = 300  # measured ~180-200 MiB for an idle desktop; headroom for one application


@dataclass(frozen=True, kw_only=True)
class DesktopOptions(procs.PoolOptions):
    """A desktop pool's options: the pool's size and runtime directory (:class:`rla_core.procs.PoolOptions`,
    default size: the desktops of MIB_PER_DESKTOP the machine holds), then each desktop's own."""

    state_root: Path | None = None
    screen: tuple[int, int] = (1280, 720)
    timeout_s: float = 60.0  # each desktop's start


class DesktopPool:
    """``size`` running desktops; :meth:`acquire` / :meth:`release` (or :meth:`desktop`) per episode."""

    def __init__(self, options: DesktopOptions | None = None) -> None:
        options = options if options is not None else DesktopOptions()
        self.size = options.members(mib_each=MIB_PER_DESKTOP)
        self.runtime_dir = options.directory("desktop")
        self._cond = threading.Condition()
        self._free: list[Desktop] = []
        self._busy: list[Desktop] = []
        self._closed = False
        atexit.register(self.close)

        def start(_: int) -> Desktop:
            return Desktop.start(
                runtime_dir=self.runtime_dir,
                state_root=options.state_root,
                screen=options.screen,
                timeout_s=options.timeout_s,
            )

        started: list[Desktop] = []
        try:
            with ThreadPoolExecutor(max_workers=self.size) as ex:
                futures = [ex.submit(start, i) for i in range(self.size)]
                errors: list[BaseException] = []
                for f in futures:
                    try:
                        started.append(f.result())
                    except BaseException as exc:  # collect, then stop what did start
                        errors.append(exc)
            if errors:
                raise errors[0]
        except BaseException:
            for d in started:
                d.stop()
            atexit.unregister(self.close)
            raise
        self._free = started

    def desktops(self) -> list[Desktop]:
        with self._cond:
            return [*self._free, *self._busy]

    def acquire(self, timeout_s: float | None = None) -> Desktop:
        """A free desktop (waits up to ``timeout_s`` for one); :class:`ProcessError` on timeout or closed."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._free or self._closed, timeout=timeout_s):
                raise ProcessError(f"no desktop of the pool ({self.size}) became free within {timeout_s}s")
            if self._closed:
                raise ProcessError("the desktop pool is closed")
            desktop = self._free.pop()
            self._busy.append(desktop)
            return desktop

    def release(self, desktop: Desktop, *, reset: bool = True) -> None:
        """Give ``desktop`` back, reset first (fresh home) unless ``reset`` is False."""
        try:
            if reset and not self._closed:
                desktop.reset()
        except BaseException:
            with self._cond:
                self._busy.remove(desktop)
            desktop.stop()  # a desktop that cannot reset is not handed out again
            raise
        with self._cond:
            self._busy.remove(desktop)
            if self._closed:
                desktop.stop()
            else:
                self._free.append(desktop)
            self._cond.notify()

    @contextlib.contextmanager
    def desktop(self, timeout_s: float | None = None) -> Iterator[Desktop]:
        """A desktop for the duration of a ``with`` block, reset when it ends."""
        d = self.acquire(timeout_s)
        try:
            yield d
        finally:
            self.release(d)

    def close(self) -> None:
        """Stop every desktop (idempotent); busy ones are stopped too."""
        with self._cond:
            self._closed = True
            everything = [*self._free, *self._busy]
            self._free, self._busy = [], []
            self._cond.notify_all()
        for d in everything:
            d.stop()
        atexit.unregister(self.close)

    def __enter__(self) -> DesktopPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
