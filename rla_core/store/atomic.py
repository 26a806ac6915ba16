"""Publish a file or a directory atomically: write a temporary sibling, then rename it into place.

This is the project's one temp-then-rename implementation (a test scans the sources for others).
The temporary sibling lives in the target's own directory, so the final ``rename`` stays on one
filesystem and is atomic: a reader (or a run killed half-way) sees the old state or the new one,
never a half-written file or directory. Whatever fails — the writer, the disk, a signal — the
temporary is removed and the target is left as it was.

* :func:`publish_file` replaces an existing file (pidfiles, manifests, reports: the newest wins).
* :func:`publish_copy` does the same with the bytes of another file, streamed (downloaded task files,
  which may be larger than memory).
* :func:`publish_dir` never replaces a non-empty directory. With ``exists="keep"`` (content-keyed
  caches: tiny models, compiled games, warm-start entries, fetched checkpoints) a complete directory
  that another writer published meanwhile is kept and this copy is dropped; with ``exists="fail"``
  (a stage's output checkpoint, which must be fresh) that is an error. An empty directory at the
  target is replaced in both modes.

Standard library only, so every layer (``procs``, ``envs``, ``models``) can import it cheaply.

Example:
    >>> publish_file(Path("/tmp/x/report.html"), "<html></html>")  # doctest: +SKIP
    >>> publish_dir(cache / key, lambda tmp: build_into(tmp), marker="config.json")  # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

__all__ = ["publish_copy", "publish_dir", "publish_file"]


@contextlib.contextmanager
def _file_sibling(path: str | os.PathLike[str]) -> Iterator[tuple[Path, Path]]:
    """Yield ``(target, tmp)``: a fresh hidden sibling ``.<name>.<random>.tmp`` of ``path`` (parents created)
    to write; on a clean exit it is renamed over ``path``, on any failure it is removed."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield target, tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def publish_file(path: str | os.PathLike[str], data: bytes | str, *, fsync: bool = False) -> Path:
    """Write ``data`` (``str`` as UTF-8) to ``path`` atomically, replacing any file there; returns ``path``.

    The bytes go to a unique hidden sibling ``.<name>.<random>.tmp`` (created with the usual umask
    permissions), which is then renamed over ``path``; missing parent directories are created. With
    ``fsync`` the bytes are flushed to disk before the rename (a manifest survives a power cut).
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with _file_sibling(path) as (target, tmp), open(tmp, "xb") as fh:
        fh.write(raw)
        if fsync:
            fh.flush()
            os.fsync(fh.fileno())
    return target


def publish_copy(path: str | os.PathLike[str], source: str | os.PathLike[str]) -> Path:
    """Copy the file ``source`` to ``path`` atomically, replacing any file there; returns ``path``.

    As :func:`publish_file`: the bytes are streamed into a hidden sibling ``.<name>.<random>.tmp``, which is
    then renamed over ``path`` (missing parents are created); on any failure the sibling is removed.
    """
    with _file_sibling(path) as (target, tmp), open(source, "rb") as src, open(tmp, "xb") as fh:
        shutil.copyfileobj(src, fh, 1 << 20)
    return target


def publish_dir(
    target: str | os.PathLike[str],
    write: Callable[[Path], object],
    *,
    exists: Literal["keep", "fail"] = "keep",
    marker: str | None = None,
) -> bool:
    """Fill a fresh temporary sibling directory with ``write(tmp)``, then rename it to ``target``.

    ``write`` gets an existing, empty directory (``.tmp-<name>-<random>`` next to ``target``, mode 0700
    as :func:`tempfile.mkdtemp` makes it) and fills it. Returns True when this call published the
    directory. When ``target`` is a non-empty directory at rename time (another writer finished first):

    * ``exists="keep"``: if it is complete — it holds the file ``marker`` (relative path), or, with no
      marker, it is a directory — it is kept, this copy is removed and False is returned; otherwise
      the rename's ``OSError`` propagates (a foreign or broken entry is never silently trusted).
    * ``exists="fail"``: :class:`FileExistsError`.
    """
    final = Path(target)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=final.parent))
    try:
        write(tmp)
        if final.is_dir():
            with contextlib.suppress(OSError):  # an empty directory is replaced; a full one stays
                final.rmdir()
        try:
            os.rename(tmp, final)
        except OSError as err:
            if exists == "fail" and final.exists():
                raise FileExistsError(
                    f"{final} appeared while it was being written; this writer needs a fresh location"
                ) from err
            complete = (final / marker).is_file() if marker is not None else final.is_dir()
            if exists == "fail" or not complete:
                raise
            return False
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
