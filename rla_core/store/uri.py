"""The one helper for artifact paths and URIs (house style 5).

Every artifact location is built here, from a root (a local path or an ``s3://`` URI) and plain name
parts. No other module concatenates path strings. Parts are checked: no separators, no ``..``, no
empty names, so a run id or stage name can never escape its root.

Example:
    >>> join("s3://bucket/runs", "run-1", "iter-0001")
    's3://bucket/runs/run-1/iter-0001'
    >>> join("/tmp/runs/", "run-1", "run.json")
    '/tmp/runs/run-1/run.json'
"""

from __future__ import annotations

import os
import posixpath
import re
from typing import TYPE_CHECKING, Any

from rla_core.errors import ArtifactError

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._=-]*$")


def is_remote(uri: str) -> bool:
    """Whether ``uri`` names a non-local filesystem (it has a protocol other than ``file://``)."""
    protocol, sep, _ = uri.partition("://")
    return bool(sep) and protocol != "file"


def check_name(part: str, *, what: str = "path part") -> str:
    """Return ``part`` if it is a safe single path component, else raise ArtifactError.

    Safe means: starts with a letter, digit or ``_``, then letters, digits, ``. _ = -``; so no ``/``,
    no ``..``, no hidden files and no empty names.
    """
    if not _NAME.match(part) or ".." in part:
        raise ArtifactError(
            f"{what} '{part}' is not a safe name; use letters, digits and . _ = - "
            "(not starting with '.' or '-', no '/' or '..')"
        )
    return part


def check_relpath(relpath: str) -> str:
    """Return a normalised relative POSIX path whose every component passes :func:`check_name`."""
    parts = [p for p in relpath.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        raise ArtifactError(f"relative path '{relpath}' is empty; name a file inside the attempt")
    for part in parts:
        check_name(part, what=f"component of '{relpath}'")
    return "/".join(parts)


def join(root: str, *parts: str) -> str:
    """Join ``root`` with relative ``parts`` (each may hold ``/``-separated safe components).

    Local roots are joined with the OS separator; URIs with ``/``. ``root`` itself is taken as given.
    """
    clean: list[str] = []
    for part in parts:
        clean.extend(check_relpath(part).split("/"))
    if is_remote(root):
        protocol, _, rest = root.partition("://")
        return f"{protocol}://" + posixpath.join(rest.rstrip("/"), *clean)
    if root.startswith("file://"):
        root = root[len("file://") :]
    return os.path.join(root, *clean)


def relative(base: str, uri: str) -> str:
    """The ``/``-separated path of ``uri`` below ``base`` (both as returned by :func:`filesystem`)."""
    base_n = base.replace("\\", "/").rstrip("/")
    uri_n = uri.replace("\\", "/")
    if not uri_n.startswith(base_n + "/"):
        raise ArtifactError(f"'{uri}' is not below '{base}'")
    return uri_n[len(base_n) + 1 :]


def filesystem(uri: str, storage_options: dict[str, Any] | None = None) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem for ``uri`` and the path within it (no protocol).

    ``storage_options`` go to the filesystem constructor (for s3fs: ``key``, ``secret``,
    ``client_kwargs={"endpoint_url": ...}``); local paths ignore them.
    """
    from fsspec.core import url_to_fs

    options = dict(storage_options or {}) if is_remote(uri) else {}
    try:
        fs, path = url_to_fs(uri, **options)
    except (ImportError, ValueError) as exc:
        raise ArtifactError(
            f"cannot open a filesystem for '{uri}': {exc}; use a local path or an s3:// URI "
            "(s3 needs the s3fs package)"
        ) from exc
    return fs, path
