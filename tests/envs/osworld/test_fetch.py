"""``fetch``: OSWorld's task files downloaded into ``desktop_env``'s cache, through the mirror mapping, from a real
HTTP server on loopback started here (each URL of a small task list answers as a test needs: the file, a
404, a truncated body, a stall, a size other than announced, an HTML page). Short timeouts and backoffs keep
the file under ~20 s.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import polars as pl
import pytest

pytest.importorskip("desktop_env", reason="needs desktop-env (scripts/setup.sh, extra osworld)")

from rla_core.envs.osworld import cache, tasks
from rla_core.envs.osworld.fetch import (
    MANIFEST,
    PARTIAL_DIR,
    FetchOptions,
    Mirrors,
    Problem,
    cache_lock,
    fetch,
    plan,
    probe_sizes,
)
from rla_core.envs.osworld.tasks import OsworldTaskError
from tests.flows.conftest import invoke_cli

GD = "https://drive.google.com/uc?id={}&export=download"
GU = "https://drive.usercontent.google.com/download?id={}&export=download&authuser=0&confirm=t"
FAST = FetchOptions(jobs=4, retries=2, timeout_s=0.4, backoff_s=0.01)


def blob(n: int, seed: int) -> bytes:
    """``n`` bytes that differ per seed (a ZIP-like binary, as an .xlsx is: never HTML)."""
    return bytes((i * 7 + seed) % 251 for i in range(n))


@dataclass
class Served:
    """What one path answers. ``kind``: ok, truncate_once, truncate_always (Content-Length, then 90 % of the
    body and the connection closed; the client keeps whole 512 KiB reads, so a body of more than one is resumed
    from where it was cut), stall_once, stall_always (100 bytes, then silence past the client's
    timeout), status_once (503 first), wrong_size (HEAD announces twice the body), missing (404)."""

    body: bytes
    kind: str = "ok"
    content_type: str = "application/octet-stream"
    gets: int = 0


@dataclass
class FileServer:
    """A threaded HTTP/1.1 file server on 127.0.0.1; also a forward proxy (absolute-form request targets)."""

    files: dict[str, Served] = field(default_factory=dict)
    log: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, path, Range)
    port: int = 0

    def base(self, prefix: str) -> str:
        return f"http://127.0.0.1:{self.port}/{prefix}/"


def _handler(server: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def _answer(self, *, head: bool) -> None:
            path = re.sub(r"^https?://[^/]+", "", self.path)  # a proxy request names the whole URL
            rng = self.headers.get("Range")
            server.log.append((self.command, path, rng))
            served = server.files.get(path)
            if served is None or served.kind == "missing":
                self.send_error(404, "Not Found")
                return
            first = not head and served.gets == 0
            served.gets += 0 if head else 1
            if served.kind == "status_once" and first:
                self.send_error(503, "Service Unavailable")
                return
            body, start = served.body, 0
            match = re.fullmatch(r"bytes=(\d+)-", rng or "")
            self.send_response(206 if match else 200)
            if match:
                start = int(match.group(1))
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            announced = len(body) - start
            if head and served.kind == "wrong_size":
                announced *= 2
            self.send_header("Content-Type", served.content_type)
            self.send_header("Content-Length", str(announced))
            self.end_headers()
            if head:
                return
            rest = body[start:]
            try:
                if served.kind == "truncate_always" or (served.kind == "truncate_once" and first):
                    self.wfile.write(rest[: len(rest) * 9 // 10])
                    self.close_connection = True
                elif served.kind == "stall_always" or (served.kind == "stall_once" and first):
                    self.wfile.write(rest[:100])
                    self.wfile.flush()
                    time.sleep(1.0)
                    self.close_connection = True
                else:
                    self.wfile.write(rest)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client closed a response it did not want whole

    return Handler


@pytest.fixture
def files_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FileServer]:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    state = FileServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def example(
    tid: str, downloads: list[tuple[str, str]], gold: tuple[str, str] | None = None
) -> dict[str, Any]:
    """An OSWorld example downloading ``(url, path in the desktop)`` files, with an optional ``cloud_file``."""
    expected = {"type": "cloud_file", "path": gold[0], "dest": gold[1]} if gold else None
    return {
        "id": tid, "domain": "libreoffice_calc", "instruction": "Fix the sheet.",
        "config": [{"type": "download", "parameters": {"files": [{"url": u, "path": p} for u, p in downloads]}}],
        "evaluator": {"func": "compare_table", "result": {"type": "vm_file", "path": "/home/user/a.xlsx",
                                                          "dest": "a.xlsx"}, "expected": expected},
    }  # fmt: skip


def write_list(path: Path, examples: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in examples))
    return path


def mirror_args(server: FileServer) -> list[str]:
    return [f"https://drive.google.com/={server.base('gd')}", f"https://drive.usercontent.google.com/={server.base('gu')}"]  # fmt: skip


def serve(
    server: FileServer, url: str, body: bytes, kind: str = "ok", content_type: str | None = None
) -> None:
    """Serve ``body`` at the mirror path of ``url`` (``/gd/…`` for drive.google.com, ``/gu/…`` for usercontent)."""
    located = Mirrors.from_args(mirror_args(server)).locate(url)
    assert isinstance(located, str)
    path = located.split(f":{server.port}", 1)[1]
    server.files[path] = Served(body, kind, content_type or "application/octet-stream")


def final_files(cache_dir: Path) -> set[str]:
    """Every file under the cache but the partial downloads, the lock and the manifest."""
    return {
        p.relative_to(cache_dir).as_posix() for p in cache_dir.rglob("*")
        if p.is_file() and PARTIAL_DIR not in p.parts and p.name not in (MANIFEST, ".fetch.lock")
    }  # fmt: skip


def test_fetch_fills_every_cache_name_through_the_mirror_and_a_second_fetch_requests_nothing(
    files_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = {name: GD.format(f"id-{name}") for name in ("shared", "truncated", "stalled", "busy")}
    urls["gold"] = GU.format("id-gold")
    bodies = {name: blob(50_000 + 1000 * i, i) for i, name in enumerate(urls)}
    bodies["truncated"] = blob(1_200_000, 7)
    kinds = {"truncated": "truncate_once", "stalled": "stall_once", "busy": "status_once"}
    for name, url in urls.items():
        serve(files_server, url, bodies[name], kinds.get(name, "ok"))
    listed = write_list(tmp_path / "tasks.jsonl", [
        example("t1", [(urls["shared"], "/home/user/a.xlsx")], gold=(urls["gold"], "gold.xlsx")),
        example("t2", [(urls["shared"], "/home/user/Desktop/b.xlsx"), (urls["truncated"], "/home/user/c.xlsx")]),
        example("t3", [(urls["stalled"], "/home/user/d.xlsx"), (urls["busy"], "/home/user/e.xlsx")]),
    ])  # fmt: skip
    loaded = tasks.load_tasks(listed)
    cache_dir = tmp_path / "cache"
    assert all(tasks.unavailable(t, cache_dir) for t in loaded)

    code = cache.run_fetch(
        [listed], cache_dir, mirrors=Mirrors.from_args(mirror_args(files_server)), options=FAST
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert all(tasks.unavailable(t, cache_dir) == [] for t in loaded)  # every file where DesktopEnv reads it
    want = {f"libreoffice_calc/{tid}/{name}": bodies[key] for tid, name, key in [
        ("t1", f"{uuid.uuid5(uuid.NAMESPACE_URL, urls['shared'])}_a.xlsx", "shared"), ("t1", "gold.xlsx", "gold"),
        ("t2", f"{uuid.uuid5(uuid.NAMESPACE_URL, urls['shared'])}_b.xlsx", "shared"),
        ("t2", f"{uuid.uuid5(uuid.NAMESPACE_URL, urls['truncated'])}_c.xlsx", "truncated"),
        ("t3", f"{uuid.uuid5(uuid.NAMESPACE_URL, urls['stalled'])}_d.xlsx", "stalled"),
        ("t3", f"{uuid.uuid5(uuid.NAMESPACE_URL, urls['busy'])}_e.xlsx", "busy"),
    ]}  # fmt: skip
    assert final_files(cache_dir) == set(want)
    assert all((cache_dir / name).read_bytes() == body for name, body in want.items())
    assert not (cache_dir / PARTIAL_DIR).exists()
    gets = Counter(path for method, path, _rng in files_server.log if method == "GET")
    assert gets["/gd/uc?id=id-shared&export=download"] == 1  # a URL two tasks share is fetched once
    # the truncated body was resumed from the bytes kept, the stall and the 503 retried
    assert any(rng and rng != "bytes=0-" for _m, path, rng in files_server.log if "id-truncated" in path)
    assert "total" not in out and "to fetch: 6 files from 5 URLs" in out
    assert re.search(r"retried https://drive.google.com/uc\?id=id-truncated\S*: truncated transfer", out)
    assert re.search(r"retried https://drive.google.com/uc\?id=id-stalled\S*: timed out", out)
    assert re.search(r"retried https://drive.google.com/uc\?id=id-busy\S*: HTTP error status: HTTP 503", out)
    manifest = pl.read_parquet(cache_dir / MANIFEST)
    assert manifest.columns == ["task_id", "field", "url", "source", "path", "bytes", "sha256"]
    assert set(manifest["path"]) == set(want) and manifest.height == 6
    row = manifest.filter(pl.col("path") == "libreoffice_calc/t1/gold.xlsx").row(0, named=True)
    assert (
        row["url"] == urls["gold"]
        and row["source"] == files_server.base("gu") + urls["gold"].split("/", 3)[3]
    )
    assert row["bytes"] == len(bodies["gold"]) and row["task_id"] == "libreoffice_calc/t1"
    import hashlib

    assert row["sha256"] == hashlib.sha256(bodies["gold"]).hexdigest()

    requests_before = len(files_server.log)
    assert (
        cache.run_fetch(
            [listed], cache_dir, mirrors=Mirrors.from_args(mirror_args(files_server)), options=FAST
        )
        == 0
    )
    assert len(files_server.log) == requests_before  # nothing downloaded, nothing even asked
    assert pl.read_parquet(cache_dir / MANIFEST).equals(manifest)
    assert "fetched 0 URLs" in capsys.readouterr().out


def test_each_failure_is_its_own_reason_and_nothing_is_left_under_a_final_name(
    files_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = {name: GD.format(f"id-{name}") for name in ("gone", "cut", "stalls", "size", "page", "fine")}
    body, big = blob(30_000, 3), blob(1_200_000, 4)
    serve(files_server, urls["gone"], body, "missing")
    serve(files_server, urls["cut"], big, "truncate_always")
    serve(files_server, urls["stalls"], body, "stall_always")
    serve(files_server, urls["size"], body, "wrong_size")
    serve(files_server, urls["page"], b"<!DOCTYPE html><html><body>Quota exceeded</body></html>", content_type="text/html")  # fmt: skip
    serve(files_server, urls["fine"], body)
    listed = write_list(tmp_path / "tasks.jsonl", [
        example(f"t-{name}", [(url, f"/home/user/{name}.xlsx")]) for name, url in urls.items()
    ])  # fmt: skip
    cache_dir = tmp_path / "cache"
    downloads = plan(tasks.load_tasks(listed), cache_dir)
    mirrors = Mirrors.from_args(mirror_args(files_server))
    options = FetchOptions(jobs=6, retries=1, timeout_s=0.3, backoff_s=0.01)
    sizes = probe_sizes(downloads, mirrors=mirrors, options=options)
    assert (
        sizes[urls["size"]] == 2 * len(body) and sizes[urls["page"]] is None and sizes[urls["gone"]] is None
    )
    outcomes = {
        o.download.url: o for o in fetch(downloads, cache_dir, mirrors=mirrors, options=options, sizes=sizes)
    }
    problems = {name: outcomes[url].problem for name, url in urls.items()}
    assert problems == {
        "gone": Problem.HTTP_STATUS, "cut": Problem.TRUNCATED, "stalls": Problem.TIMEOUT,
        "size": Problem.WRONG_SIZE, "page": Problem.HTML_PAGE, "fine": None,
    }  # fmt: skip
    assert outcomes[urls["gone"]].detail == "HTTP 404 Not Found"
    assert outcomes[urls["gone"]].retried == []  # a 404 is not tried again
    assert len(outcomes[urls["cut"]].retried) == 1 and len(outcomes[urls["stalls"]].retried) == 1
    assert "announced 60000" in outcomes[urls["size"]].detail
    # only the file that arrived whole is under its final name; the cut one waits in .partial to resume
    assert final_files(cache_dir) == {f"libreoffice_calc/t-fine/{uuid.uuid5(uuid.NAMESPACE_URL, urls['fine'])}_fine.xlsx"}  # fmt: skip
    assert not list(cache_dir.rglob("*.tmp"))
    kept = {p.parent.name for p in (cache_dir / PARTIAL_DIR).rglob("*.part")}
    assert str(uuid.uuid5(uuid.NAMESPACE_URL, urls["cut"])) in kept

    # the same through the command: a table of reasons and one line per missing file, exit 1
    assert cache.main(["fetch", str(listed), "--cache-dir", str(cache_dir), "--retries", "0", "--timeout", "0.3",
                       *(a for m in mirror_args(files_server) for a in ("--mirror", m))]) == 1  # fmt: skip
    out = capsys.readouterr().out
    for reason in (
        "HTTP error status",
        "truncated transfer",
        "timed out",
        "wrong size",
        "HTML page for a non-HTML file",
    ):
        assert f"| {reason} | 1 |" in out
    assert f"missing libreoffice_calc/t-gone config[0].parameters.files[0]: {urls['gone']} — HTTP error status: HTTP 404 Not Found" in out  # fmt: skip

    # the server mends: the cut file resumes from the bytes kept, and the page is not asked for again as data
    files_server.files["/gd/uc?id=id-cut&export=download"].kind = "ok"
    files_server.log.clear()
    again = fetch(plan(tasks.load_tasks(listed), cache_dir)[:2], cache_dir, mirrors=mirrors, options=options)
    assert [o.problem for o in again] == [Problem.HTTP_STATUS, None]
    ranges = [rng for _m, path, rng in files_server.log if "id-cut" in path and rng]
    assert ranges and int(ranges[0].split("=")[1].rstrip("-")) > 0
    name = f"libreoffice_calc/t-cut/{uuid.uuid5(uuid.NAMESPACE_URL, urls['cut'])}_cut.xlsx"
    assert (cache_dir / name).read_bytes() == big


def test_the_standard_proxy_variables_are_honoured(
    files_server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{files_server.port}")
    monkeypatch.setenv("NO_PROXY", "")
    url = GD.format("id-proxied")
    files_server.files["/mirror/uc?id=id-proxied&export=download"] = Served(blob(5000, 9))
    listed = write_list(tmp_path / "tasks.jsonl", [example("t", [(url, "/home/user/a.xlsx")])])
    mirrors = Mirrors.from_args(["https://drive.google.com/=http://osworld-mirror.invalid/mirror/"])
    assert cache.run_fetch([listed], tmp_path / "cache", mirrors=mirrors, options=FAST) == 0
    # a host that does not resolve, reached through the proxy: the requests came to it in absolute form
    assert {m for m, _path, _rng in files_server.log} == {"HEAD", "GET"}
    assert tasks.unavailable(tasks.load_tasks(listed)[0], tmp_path / "cache") == []


def test_list_urls_a_local_mirror_the_runnable_filter_and_bad_input(
    files_server: FileServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = [GD.format("id-a"), GU.format("id-b"), "https://arxiv.org/pdf/2312.13771.pdf"]
    root = example(
        "t", [(urls[0], "/home/user/a.xlsx"), (urls[2], "/home/user/p.pdf")], gold=(urls[1], "g.xlsx")
    )
    needs_root = example("s", [(urls[0], "/home/user/a.xlsx")])
    needs_root["config"].append({"type": "execute", "parameters": {"command": "sudo apt-get install x", "shell": True}})  # fmt: skip
    listed = write_list(tmp_path / "tasks.jsonl", [root, needs_root])
    cache_dir, local = tmp_path / "cache", tmp_path / "mirror"
    mirror = [
        f"https://drive.google.com/={local}",
        f"https://drive.usercontent.google.com/={files_server.base('gu')}",
    ]

    assert cache.main(["fetch", str(listed), "--list-urls", "--cache-dir", str(cache_dir),
                       *(a for m in mirror for a in ("--mirror", m))]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"{urls[0]}\t{local}/uc?id=id-a&export=download\t"
        f"libreoffice_calc/t/{uuid.uuid5(uuid.NAMESPACE_URL, urls[0])}_a.xlsx,"
        f"libreoffice_calc/s/{uuid.uuid5(uuid.NAMESPACE_URL, urls[0])}_a.xlsx"
    )
    assert lines[1].startswith(f"{urls[2]}\t{urls[2]}\t") and lines[2].startswith(f"{urls[1]}\t{files_server.base('gu')}")  # fmt: skip
    assert files_server.log == [] and not cache_dir.exists()  # nothing asked, nothing written

    # a local directory as mirror; the task that needs root is left out with --runnable-only
    local.mkdir()
    (local / "uc?id=id-a&export=download").write_bytes(b"PK\x03\x04 sheet")
    files_server.files["/gu/download?id=id-b&export=download&authuser=0&confirm=t"] = Served(b"PK gold")
    pdf_mirror = f"https://arxiv.org/={files_server.base('arxiv')}"
    files_server.files["/arxiv/pdf/2312.13771.pdf"] = Served(b"%PDF-1.4 paper")
    code = cache.main(["fetch", str(listed), "--runnable-only", "--cache-dir", str(cache_dir),
                       *(a for m in [*mirror, pdf_mirror] for a in ("--mirror", m))])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "1 of 2 tasks need nothing but their files" in out
    assert final_files(cache_dir) == {
        f"libreoffice_calc/t/{uuid.uuid5(uuid.NAMESPACE_URL, urls[0])}_a.xlsx", "libreoffice_calc/t/g.xlsx",
        f"libreoffice_calc/t/{uuid.uuid5(uuid.NAMESPACE_URL, urls[2])}_p.pdf",
    }  # fmt: skip
    (local / "uc?id=id-a&export=download").unlink()
    code = cache.main(["fetch", str(listed), "--cache-dir", str(cache_dir), *(a for m in mirror for a in ("--mirror", m))])  # fmt: skip
    assert code == 1 and "not in the mirror directory: no file" in capsys.readouterr().out

    # bad input: a clear error before anything is written
    fresh = tmp_path / "fresh"
    with pytest.raises(OsworldTaskError, match="--mirror 'nope' has no '='; write PREFIX=TARGET"):
        cache.main(["fetch", str(listed), "--cache-dir", str(fresh), "--mirror", "nope"])
    with pytest.raises(OsworldTaskError, match=r"mirror prefix 'drive\.google\.com' is not an http"):
        cache.main(["fetch", str(listed), "--cache-dir", str(fresh), "--mirror", "drive.google.com=/srv"])
    assert not fresh.exists()
    with cache_lock(cache_dir), pytest.raises(OsworldTaskError, match="another fetch holds"):
        fetch(plan(tasks.load_tasks(listed), fresh)[:1], cache_dir)


def test_rla_osworld_fetch_reads_the_mirrors_from_the_config(
    files_server: FileServer, tmp_path: Path
) -> None:
    url = GD.format("id-cfg")
    files_server.files["/gd/uc?id=id-cfg&export=download"] = Served(blob(2000, 5))
    listed = write_list(tmp_path / "tasks.jsonl", [example("t", [(url, "/home/user/a.xlsx")])])
    mirrors = json.dumps({"https://drive.google.com/": files_server.base("gd")})
    code, output = invoke_cli(["osworld", "fetch", str(listed), "--preset", "osworld", "--set",
                               "gui.osworld.cache_dir=c", "--set", f"gui.osworld.mirrors={mirrors}"], tmp_path)  # fmt: skip
    assert code == 0, output
    assert tasks.unavailable(tasks.load_tasks(listed)[0], tmp_path / "c") == []
    code, output = invoke_cli(["osworld", "fetch", "--set", "gui.osworld.cache_dir=c"], tmp_path)
    assert code == 1 and "name the task lists, or give a config with gui.engine: osworld" in output
