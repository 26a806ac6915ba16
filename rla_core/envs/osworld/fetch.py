"""Download the files OSWorld tasks fetch into ``desktop_env``'s cache, from their URLs or from mirrors.

OSWorld's own set-up does a plain GET with three tries when a task starts; a local desktop has no network,
so a task runs here only when its files are already in the cache (:mod:`rla_core.envs.osworld.cache`).
:func:`fetch` puts them there ahead of time, for every ``download`` set-up step and ``cloud_file`` getter
of a task list (:func:`rla_core.envs.osworld.tasks.needed_files` names them and their cache names):

* **one download per URL**: a URL several tasks share is fetched once and copied to each of its cache
  names; a file already in the cache is never fetched again (a second fetch makes no request at all);
* **Google Drive** (``drive.google.com``, ``docs.google.com``, ``drive.usercontent.google.com`` with an
  ``id``): through `gdown <https://github.com/wkentaro/gdown>`_, which answers the confirmation page Drive
  shows instead of a large file; every other URL through gdown's plain-HTTP path, which gives both the same
  resume (``Range`` with ``If-Range`` into a ``.part`` file), the check of the body against
  ``Content-Length`` and the standard proxy variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``,
  read by requests);
* **retries with backoff** (:class:`FetchOptions`): a timeout, a dropped connection, a truncated body (resumed
  from the bytes kept), a 408/429/5xx answer, or a server that ignores the byte range (restarted) are tried
  again after ``backoff_s · 2^attempt``; each such attempt is recorded (:attr:`Outcome.retried`);
* **checks before a file is kept**, each its own :class:`Problem`: an HTML page for a file whose name is not
  ``.html`` (Drive's quota or sign-in pages answer with 200), a size other than the one the server announced;
  such a file is deleted, never stored;
* **nothing half-written under a final name**: downloads go to ``<cache>/.partial/<uuid5(URL)>/`` (where an
  interrupted one is resumed next time) and are copied to their cache names by
  :func:`rla_core.store.atomic.publish_copy`; one fetch at a time per cache (a lock file).

**Mirrors** (:class:`Mirrors`, ``--mirror PREFIX=TARGET`` and the config key ``gui.osworld.mirrors``): a URL
that starts with ``PREFIX`` is fetched from ``TARGET`` + the rest of the URL, where ``TARGET`` is a base URL
(``http://…``/``https://…``) or a local directory (the rest of the URL is then a path in it, query string
included). The longest matching prefix wins. :func:`listing` prints every URL with its mirror location and
cache names, for whoever fills a mirror.

Hand-written here, because no library does it for us: the mirror mapping, the HTML sniff, and the retry
loop around gdown (gdown retries too, but reports its attempts only on stderr; we need each attempt's reason,
and retries on 5xx answers, which it does not make).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from rla_core.envs.osworld.tasks import OsworldTaskError, needed_files, task_cache, task_key
from rla_core.store.atomic import publish_copy

PARTIAL_DIR = ".partial"  # under the cache: downloads in progress, one folder per URL
LOCK_FILE = ".fetch.lock"
DRIVE_HOSTS = frozenset({"drive.google.com", "docs.google.com"})
DRIVE_CONTENT_HOST = "drive.usercontent.google.com"
HTML_SUFFIXES = (".html", ".htm")
RETRIED_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


class Problem(StrEnum):
    """Why a file was not fetched, or why an attempt was retried."""

    HTTP_STATUS = "HTTP error status"
    TIMEOUT = "timed out"
    TRUNCATED = "truncated transfer"
    CONNECTION = "connection failed"
    RANGE_IGNORED = "byte range not honoured"
    WRONG_SIZE = "wrong size"
    HTML_PAGE = "HTML page for a non-HTML file"
    DRIVE = "Google Drive refused the file"
    NOT_IN_MIRROR = "not in the mirror directory"


RETRIED = frozenset({Problem.TIMEOUT, Problem.TRUNCATED, Problem.CONNECTION, Problem.RANGE_IGNORED})


@dataclass(frozen=True)
class Target:
    """One file in the cache: the task (key) and field that need it, and its path in the cache."""

    task: str
    field: str
    path: Path


@dataclass(frozen=True)
class Download:
    """One URL and every cache file it fills."""

    url: str
    targets: tuple[Target, ...]

    @property
    def html_expected(self) -> bool:
        """Whether an HTML answer is what the task asks for (every cache name ends in .html/.htm)."""
        return all(t.path.name.lower().endswith(HTML_SUFFIXES) for t in self.targets)


def plan(tasks: Iterable[dict[str, Any]], cache_dir: Path, *, all_files: bool = False) -> list[Download]:
    """The downloads that fill every file ``tasks`` need and the cache lacks (all of them with ``all_files``),
    one per URL, in the order the tasks first name them."""
    by_url: dict[str, list[Target]] = {}
    for task in tasks:
        folder = task_cache(cache_dir, task)
        for fld, url, name in needed_files(task):
            path = folder / name
            if all_files or not path.is_file():
                by_url.setdefault(url, []).append(Target(task_key(task), fld, path))
    return [Download(url, tuple(dict.fromkeys(targets))) for url, targets in by_url.items()]


# ---- mirrors -----------------------------------------------------------------------------------------


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


@dataclass(frozen=True)
class Mirrors:
    """URL prefix → base URL or local directory; :meth:`locate` maps a URL (the longest prefix wins)."""

    rules: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, mapping: Mapping[str, str], *, where: str) -> Mirrors:
        """Checked rules from ``{prefix: target}``; ``where`` names their origin in the error."""
        for prefix, target in mapping.items():
            if not isinstance(prefix, str) or not _is_url(prefix):
                raise OsworldTaskError(
                    f"{where}: mirror prefix {prefix!r} is not an http(s) URL prefix; write "
                    "PREFIX=TARGET, e.g. https://drive.google.com/=https://mirror.example/drive/"
                )
            if not isinstance(target, str) or not target.strip():
                raise OsworldTaskError(
                    f"{where}: mirror target for {prefix!r} is empty; give a base URL or a local directory"
                )
            if not _is_url(target) and "://" in target and not target.startswith("file://"):
                raise OsworldTaskError(
                    f"{where}: mirror target {target!r} is neither an http(s) URL nor a local directory"
                )
        rules = sorted(mapping.items(), key=lambda kv: -len(kv[0]))
        return cls(tuple((p, t.removeprefix("file://")) for p, t in rules))

    @classmethod
    def from_args(cls, pairs: Sequence[str], base: Mapping[str, str] | None = None) -> Mirrors:
        """``base`` (the config's ``gui.osworld.mirrors``) with each ``PREFIX=TARGET`` of ``pairs`` on top."""
        mapping = dict(base or {})
        for pair in pairs:
            prefix, sep, target = pair.partition("=")
            if not sep:
                raise OsworldTaskError(
                    f"--mirror {pair!r} has no '='; write PREFIX=TARGET (the first '=' separates them; a "
                    "prefix with '=' goes in the config key gui.osworld.mirrors)"
                )
            mapping[prefix] = target
        return cls.parse(mapping, where="--mirror" if pairs else "gui.osworld.mirrors")

    def locate(self, url: str) -> str | Path | None:
        """Where ``url`` is fetched from under these rules: a URL, a local file, or None (no rule)."""
        for prefix, target in self.rules:
            if url.startswith(prefix):
                rest = url[len(prefix) :]
                if _is_url(target):
                    return target + rest
                relative = Path(rest.lstrip("/"))
                if ".." in relative.parts:
                    raise OsworldTaskError(f"URL {url!r} leads out of the mirror directory {target!r}")
                return Path(target) / relative
        return None


def drive_id(url: str) -> str | None:
    """The Google Drive file id of a Drive download URL (gdown then handles the confirmation page), else None.

    >>> drive_id("https://drive.usercontent.google.com/download?id=1a-B&export=download&confirm=t")
    '1a-B'
    >>> drive_id("https://drive.google.com/uc?id=1a-B&export=download"), drive_id("https://arxiv.org/x.pdf")
    ('1a-B', None)
    """
    parsed = urllib.parse.urlparse(url)
    if parsed.hostname not in DRIVE_HOSTS | {DRIVE_CONTENT_HOST}:
        return None
    if parsed.hostname == DRIVE_CONTENT_HOST:
        ids = urllib.parse.parse_qs(parsed.query).get("id", [])
        return ids[0] if len(ids) == 1 else None
    from gdown.parse_url import parse_url

    return parse_url(url)[0]


# ---- fetching ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchOptions:
    """How :func:`fetch` downloads (speed and patience only: the files are the same)."""

    jobs: int = 4  # downloads at once
    retries: int = 4  # further attempts after a retried problem
    timeout_s: float = 60.0  # to connect, and between two reads of the body
    backoff_s: float = 1.0  # wait before retry k (0-based): backoff_s * 2**k


@dataclass
class Outcome:
    """What became of one download: ``problem`` None when its files are in the cache."""

    download: Download
    source: str  # where it was fetched from: the URL, its mirror URL or mirror file, or "Google Drive id X"
    problem: Problem | None = None
    detail: str = ""
    size: int | None = None
    sha256: str | None = None
    retried: list[str] = field(default_factory=list)  # "<problem>: <detail>" of each retried attempt


class _Failed(Exception):
    def __init__(
        self, problem: Problem, detail: str, *, restart: bool = False, status: int | None = None
    ) -> None:
        super().__init__(f"{problem}: {detail}")
        self.problem, self.detail, self.restart, self.status = problem, detail, restart, status

    @property
    def retried(self) -> bool:
        return self.problem in RETRIED or self.status in RETRIED_STATUS


def _source(download: Download, mirrors: Mirrors) -> tuple[str | Path, str | None]:
    """(where to fetch from, the Drive id when gdown should resolve a Drive page)."""
    located = mirrors.locate(download.url)
    if located is not None:
        return located, None
    return download.url, drive_id(download.url)


def _describe(where: str | Path, drive: str | None) -> str:
    return f"Google Drive id {drive}" if drive else str(where)


def probe_sizes(
    downloads: Sequence[Download], *, mirrors: Mirrors, options: FetchOptions
) -> dict[str, int | None]:
    """Each download's size as its source announces it (a HEAD request; a mirror file's size), None when
    unknown — a Drive confirmation page, no ``Content-Length``, or no answer (the download reports why)."""
    import requests

    def size(download: Download) -> int | None:
        where, _drive = _source(download, mirrors)
        if isinstance(where, Path):
            return where.stat().st_size if where.is_file() else None
        with requests.Session() as session:
            try:
                head = session.head(
                    where,
                    allow_redirects=True,
                    timeout=options.timeout_s,
                    headers={"Accept-Encoding": "identity"},
                )
            except requests.RequestException:
                return None
        html = head.headers.get("Content-Type", "").startswith("text/html")
        length = head.headers.get("Content-Length")
        if (
            head.status_code != 200
            or length is None
            or not length.isdigit()
            or (html and not download.html_expected)
        ):
            return None
        return int(length)

    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        return dict(zip((d.url for d in downloads), pool.map(size, downloads), strict=True))


def _looks_like_html(path: Path) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(512).lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return head.startswith((b"<!doctype html", b"<html"))


def _classify(exc: BaseException) -> _Failed:
    """The :class:`Problem` of what gdown or requests raised (gdown's DownloadError carries no subtype: its
    message says which check failed)."""
    import requests
    import urllib3
    from gdown.exceptions import DownloadError, FileURLRetrievalError

    if isinstance(exc, FileURLRetrievalError):
        return _Failed(Problem.DRIVE, str(exc).strip().splitlines()[0] if str(exc).strip() else "no file")
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        status = exc.response.status_code
        return _Failed(
            Problem.HTTP_STATUS, f"HTTP {status} {exc.response.reason or ''}".strip(), status=status
        )
    if isinstance(exc, DownloadError):
        text = str(exc)
        if "incomplete" in text:
            return _Failed(Problem.TRUNCATED, text.split(".\n")[0].removesuffix("."))
        if "did not honor" in text:
            return _Failed(
                Problem.RANGE_IGNORED, "the server answered a resume with the whole file", restart=True
            )
        if "exceeds" in text:
            return _Failed(Problem.WRONG_SIZE, "the body is longer than its Content-Length", restart=True)
        return _Failed(Problem.CONNECTION, text.splitlines()[0])
    timed_out = isinstance(exc, requests.Timeout) or any(
        isinstance(arg, urllib3.exceptions.ReadTimeoutError | TimeoutError) for arg in exc.args
    )
    if timed_out or isinstance(exc, TimeoutError):
        return _Failed(Problem.TIMEOUT, str(exc).splitlines()[0] if str(exc) else "no data")
    return _Failed(Problem.CONNECTION, f"{exc.__class__.__name__}: {exc}".splitlines()[0])


def _transfer(
    where: str | Path, drive: str | None, staged: Path, options: FetchOptions, progress: Callable[[int], None]
) -> None:
    """One attempt: ``where`` into ``staged`` (resuming a partial file gdown kept next to it)."""
    import gdown
    import requests
    from gdown.exceptions import DownloadError, FileURLRetrievalError

    if isinstance(where, Path):
        if not where.is_file():
            raise _Failed(Problem.NOT_IN_MIRROR, f"no file {where}")
        shutil.copyfile(where, staged)
        progress(staged.stat().st_size)
        return
    try:
        gdown.download(
            url=None if drive else where, id=drive, output=str(staged), quiet=True, resume=True,
            use_cookies=False, timeout=options.timeout_s, retries=0,
            progress=lambda done, _total: progress(done),
        )  # fmt: skip
    except (requests.RequestException, DownloadError, FileURLRetrievalError, OSError) as exc:
        raise _classify(exc) from exc


def _one(
    download: Download,
    *,
    cache_dir: Path,
    mirrors: Mirrors,
    options: FetchOptions,
    announced: int | None,
    progress: Callable[[int], None],
) -> Outcome:
    where, drive = _source(download, mirrors)
    outcome = Outcome(download, _describe(where, drive))
    folder = cache_dir / PARTIAL_DIR / str(uuid.uuid5(uuid.NAMESPACE_URL, download.url))
    folder.mkdir(parents=True, exist_ok=True)
    staged = folder / "file"
    try:
        for attempt in range(options.retries + 1):
            try:
                _transfer(where, drive, staged, options, progress)
                break
            except _Failed as failed:
                if failed.restart:  # the kept bytes cannot be continued
                    shutil.rmtree(folder, ignore_errors=True)
                    folder.mkdir(parents=True, exist_ok=True)
                if not failed.retried or attempt == options.retries:
                    outcome.problem, outcome.detail = failed.problem, failed.detail
                    return outcome
                outcome.retried.append(f"{failed.problem}: {failed.detail}")
                time.sleep(options.backoff_s * 2**attempt)
        size = staged.stat().st_size
        if announced is not None and size != announced:
            outcome.problem = Problem.WRONG_SIZE
            outcome.detail = f"got {size} bytes, the server announced {announced} (Content-Length)"
        elif not download.html_expected and _looks_like_html(staged):
            outcome.problem = Problem.HTML_PAGE
            outcome.detail = f"an HTML page ({size} bytes) came for {download.targets[0].path.name}"
        if outcome.problem is not None:
            return outcome
        digest = _sha256(staged)
        for target in download.targets:
            publish_copy(target.path, staged)
        outcome.size, outcome.sha256 = size, digest
        return outcome
    finally:
        # Kept only to resume: a transfer that was cut, or one this process did not finish (interrupted).
        finished = outcome.sha256 is not None or outcome.problem is not None
        if finished and outcome.problem not in RETRIED:
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def cache_lock(cache_dir: Path) -> Any:
    """Hold ``<cache>/.fetch.lock`` for one fetch (a second one at the same time fails, naming the lock)."""
    from filelock import FileLock, Timeout

    cache_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(cache_dir / LOCK_FILE))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise OsworldTaskError(
            f"another fetch holds {cache_dir / LOCK_FILE}; wait for it to end (or remove the lock file if no "
            "fetch is running)"
        ) from None
    try:
        yield
    finally:
        lock.release()


def fetch(
    downloads: Sequence[Download],
    cache_dir: Path,
    *,
    mirrors: Mirrors = Mirrors(),
    options: FetchOptions = FetchOptions(),
    sizes: Mapping[str, int | None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[Outcome]:
    """Fetch ``downloads`` (:func:`plan`) into ``cache_dir``, ``options.jobs`` at once; one outcome each, in
    order. ``sizes`` (:func:`probe_sizes`) are the announced sizes a file must have; ``progress`` gets
    every new byte count (thread-safe: called under a lock)."""
    lock = threading.Lock()
    seen: dict[str, int] = {}

    def counter(url: str) -> Callable[[int], None]:
        def tick(done: int) -> None:
            with lock:
                new = done - seen.get(url, 0)
                seen[url] = max(done, seen.get(url, 0))
                if progress is not None and new > 0:
                    progress(new)

        return tick

    with cache_lock(cache_dir), ThreadPoolExecutor(max_workers=options.jobs) as pool:
        futures = [
            pool.submit(
                _one,
                d,
                cache_dir=cache_dir,
                mirrors=mirrors,
                options=options,
                announced=(sizes or {}).get(d.url),
                progress=counter(d.url),
            )
            for d in downloads
        ]
        outcomes = [f.result() for f in futures]
    with contextlib.suppress(OSError):
        (cache_dir / PARTIAL_DIR).rmdir()  # gone when nothing is left to resume
    return outcomes


def listing(downloads: Sequence[Download], cache_dir: Path, mirrors: Mirrors) -> Iterable[str]:
    """One tab-separated line per URL: the URL, where it is fetched from (its mirror location, a Drive id, or
    the URL itself) and its cache names (relative to ``cache_dir``, comma-separated)."""
    for d in downloads:
        where, drive = _source(d, mirrors)
        names = ",".join(t.path.relative_to(cache_dir).as_posix() for t in d.targets)
        yield f"{d.url}\t{_describe(where, drive)}\t{names}"


def env_proxies() -> list[str]:
    """The standard proxy variables that are set (requests honours them), for the summary."""
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")
    return [n for n in names if os.environ.get(n) or os.environ.get(n.lower())]


# ---- the manifest --------------------------------------------------------------------------------------

MANIFEST = "manifest.parquet"
IN_CACHE_BEFORE = "in the cache before"  # the source of a file fetch found there (copied by `fill`, by hand)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def update_manifest(cache_dir: Path, needed: Sequence[Download], outcomes: Sequence[Outcome]) -> Path:
    """Rewrite ``<cache>/manifest.parquet`` (schema ``osworld_files``: one row per cached file — task, field,
    URL, source, path relative to the cache, bytes, sha256): the rows of ``outcomes`` that were fetched, the
    files of ``needed`` (:func:`plan` with ``all_files``) present without a row (source
    :data:`IN_CACHE_BEFORE`), and the earlier rows whose file is still there with its size."""
    import io

    import polars as pl

    from rla_core.schemas import get_schema, validate
    from rla_core.store.atomic import publish_file

    path = cache_dir / MANIFEST
    old = validate("osworld_files", pl.read_parquet(path), where=str(path)) if path.is_file() else None
    rows = {r["path"]: r for r in (old.iter_rows(named=True) if old is not None else [])}

    def row(target: Target, url: str, source: str, size: int, sha256: str) -> dict[str, Any]:
        rel = target.path.relative_to(cache_dir).as_posix()
        return {"task_id": target.task, "field": target.field, "url": url, "source": source, "path": rel,
                "bytes": size, "sha256": sha256}  # fmt: skip

    for o in outcomes:
        if o.problem is None and o.size is not None and o.sha256 is not None:
            for t in o.download.targets:
                rows[t.path.relative_to(cache_dir).as_posix()] = row(
                    t, o.download.url, o.source, o.size, o.sha256
                )
    rows = {
        rel: r for rel, r in rows.items()
        if (cache_dir / rel).is_file() and (cache_dir / rel).stat().st_size == r["bytes"]
    }  # fmt: skip
    for d in needed:
        for t in d.targets:
            rel = t.path.relative_to(cache_dir).as_posix()
            if rel not in rows and t.path.is_file():
                rows[rel] = row(t, d.url, IN_CACHE_BEFORE, t.path.stat().st_size, _sha256(t.path))
    frame = pl.DataFrame([rows[k] for k in sorted(rows)], schema=get_schema("osworld_files").polars_schema)
    buffer = io.BytesIO()
    validate("osworld_files", frame).write_parquet(buffer)
    return publish_file(path, buffer.getvalue())
