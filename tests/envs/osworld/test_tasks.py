"""OSWorld task sources, the adaptive format, bad input, the file cache and availability; the rewriter."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("desktop_env", reason="needs desktop-env (scripts/setup.sh, extra osworld)")

from rla_core.algo.adaptation import accept_variant
from rla_core.config import AdaptationConfig
from rla_core.envs.osworld import cache, tasks
from rla_core.envs.osworld.rewriter import OsworldRewriter, check_osworld_candidate
from rla_core.envs.osworld.tasks import OsworldTaskError
from rla_core.envs.rewriter import Goal, RewriteRequest
from rla_core.settings.base import PROJECT_ROOT

SHIPPED = PROJECT_ROOT / "data" / "gui" / "osworld"
URL = "https://drive.usercontent.google.com/download?id=abc&export=download"


def shipped() -> list[dict[str, Any]]:
    return tasks.load_tasks(SHIPPED / "all.json")


def test_the_shipped_set_covers_what_part_1_tests() -> None:
    loaded = shipped()
    assert len(loaded) >= 12 and {t["domain"] for t in loaded} == {"os", "terminal", "chrome"}
    steps = {s["type"] for t in loaded for s in t["config"]}
    assert {"launch", "execute", "command", "open", "sleep", "activate_window", "close_window"} <= steps
    assert "chrome_open_tabs" in steps
    evaluators = [e for t in loaded for e in t["evaluator_list"].values()]
    assert {e["func"] for e in evaluators} == {
        "exact_match",
        "check_include_exclude",
        "check_direct_json_object",
        "is_in_list",
    }
    getters = {g["type"] for e in evaluators for g in (e["result"], e["expected"]) if g}
    assert {"vm_command_line", "vm_terminal_output", "rule", "accessibility_tree"} <= getters
    assert {"open_tabs_info", "active_url_from_accessTree"} <= getters  # through the debugging port, the tree
    chrome = [t for t in loaded if t["domain"] == "chrome"]
    assert len(chrome) >= 3 and all(  # offline: local pages only
        u.startswith(("file:", "about:")) for t in chrome for s in t["config"]
        for u in s["parameters"].get("urls_to_open", [])
    )  # fmt: skip
    for t in loaded:  # every shipped task starts with its first hint, so its solution is among the candidates
        assert tasks.hint_count(t) == 1 and set(t["solutions"]) == set(t["task_template"])
        assert tasks.unavailable(t, Path("/nonexistent")) == []
    train, ev = (json.loads((SHIPPED / f).read_text()) for f in ("train.json", "eval.json"))
    assert not {i for v in train.values() for i in v} & {i for v in ev.values() for i in v}


def test_plain_examples_become_the_adaptive_form_and_jsonl_is_a_source(tmp_path: Path) -> None:
    plain = {
        "id": "p1",
        "instruction": "Do it.",
        "config": [],
        "evaluator": {"func": "infeasible"},
        "snapshot": "os",
    }
    (tmp_path / "t.jsonl").write_text(json.dumps(plain) + "\n")
    [task] = tasks.load_tasks(tmp_path / "t.jsonl")
    assert task["current_task"] == task["task_template"] == {"default": "Do it."}
    assert task["evaluator_list"] == {"default": {"func": "infeasible"}} and "instruction" not in task
    assert tasks.desktop_task(task) == {
        "id": "p1",
        "instruction": "Do it.",
        "config": [],
        "evaluator": {"func": "infeasible"},
        "snapshot": "os",
    }


def _bad(task: dict[str, Any], tmp_path: Path) -> str:
    (tmp_path / "examples" / "os").mkdir(parents=True, exist_ok=True)
    (tmp_path / "examples" / "os" / f"{task['id']}.json").write_text(json.dumps(task))
    (tmp_path / "meta.json").write_text(json.dumps({"os": [task["id"]]}))
    with pytest.raises(OsworldTaskError) as err:
        tasks.load_tasks(tmp_path / "meta.json")
    return str(err.value)


def test_bad_input_names_the_task_and_the_field(tmp_path: Path) -> None:
    base = next(t for t in shipped() if t["id"] == "rla-os-json")
    t = copy.deepcopy(base)
    t["evaluator_list"]["level"]["func"] = "no_such_metric"
    msg = _bad(t, tmp_path)
    assert "'rla-os-json'" in msg and "evaluator_list['level'].func" in msg and "'no_such_metric'" in msg
    t = copy.deepcopy(base)
    t["evaluator_list"]["debug"]["result"]["type"] = "no_such_getter"
    assert "evaluator_list['debug'].result.type: 'no_such_getter' is not a getter" in _bad(t, tmp_path)
    t = copy.deepcopy(base)
    t["config"][1]["type"] = "teleport"
    assert "field config[1].type: 'teleport' is not a set-up type" in _bad(t, tmp_path)
    t = copy.deepcopy(base)
    t["current_task"] = {"nope": "x"}
    assert "current_task['nope']" in _bad(t, tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"os": ["missing-id"]}))
    with pytest.raises(OsworldTaskError, match="'missing-id' of domain 'os'"):
        tasks.load_tasks(tmp_path / "meta.json")


def test_missing_cached_files_make_a_task_unavailable_with_its_url_and_the_cache_fill_fixes_it(
    tmp_path: Path,
) -> None:
    task = tasks.normalise({
        "id": "dl", "instruction": "Open the sheet.",
        "config": [{"type": "download", "parameters": {"files": [{"url": URL, "path": "/home/user/Desktop/a.xlsx"}]}}],
        "evaluator": {"func": "exact_match", "result": {"type": "cloud_file", "path": URL + "2", "dest": "gold.xlsx"},
                      "expected": {"type": "rule", "rules": {"expected": "x"}}},
    })  # fmt: skip
    tasks.check_task(task)
    cache_dir = tmp_path / "cache"
    reasons = tasks.unavailable(task, cache_dir)
    setup_name = f"{uuid.uuid5(uuid.NAMESPACE_URL, URL)}_a.xlsx"
    assert reasons == [
        f"config[0].parameters.files[0] needs {URL} (not in the cache as {cache_dir / 'dl' / setup_name})",
        f"evaluator_list['default'].result[0] needs {URL}2 (not in the cache as {cache_dir / 'dl' / 'gold.xlsx'})",
    ]
    (tmp_path / "t.jsonl").write_text(json.dumps(task) + "\n")
    source = tmp_path / "downloads"
    (source / "dl").mkdir(parents=True)
    (source / "dl" / "a.xlsx").write_bytes(b"sheet")
    assert cache.main(["fill", str(tmp_path / "t.jsonl"), str(source), "--cache-dir", str(cache_dir)]) == 1
    assert (cache_dir / "dl" / setup_name).read_bytes() == b"sheet"
    assert len(tasks.unavailable(task, cache_dir)) == 1  # gold.xlsx is still missing
    (source / "gold.xlsx").write_bytes(b"gold")
    assert cache.main(["fill", str(tmp_path / "t.jsonl"), str(source), "--cache-dir", str(cache_dir)]) == 0
    assert tasks.unavailable(task, cache_dir) == []


def _request(spec: dict[str, Any], goal: Goal, root: dict[str, Any] | None = None) -> RewriteRequest:
    return RewriteRequest(
        spec["id"], "t0", spec, root or spec, goal, prev_acc=0.0 if goal is Goal.EASIER else 1.0
    )


def test_the_rewriter_moves_hints_and_evaluator_keys_within_the_template_only() -> None:
    task = next(t for t in shipped() if t["id"] == "rla-os-mkdir")  # keys dir, nested; one hint each
    hint = "Hint: in the terminal, run `mkdir ~/Desktop/projects`."
    assert task["current_task"] == {"dir": "Create a folder named 'projects' on the Desktop. " + hint}
    harder = OsworldRewriter().propose(_request(task, Goal.HARDER), k=3, seed=0)
    assert [c.spec["current_task"] for c in harder if c.spec] == [
        {"dir": "Create a folder named 'projects' on the Desktop."},  # one hint less
        {
            "nested": task["task_template"]["nested"]
            + " Hint: in the terminal, run `mkdir -p ~/Desktop/projects/2024`."
        },
        {"nested": task["task_template"]["nested"]},
    ]
    assert all(check_osworld_candidate(c.spec, _request(task, Goal.HARDER)) is None for c in harder if c.spec)
    # easier than the easiest key with all its hints: nothing to propose
    [none] = OsworldRewriter().propose(_request(task, Goal.EASIER), k=3, seed=0)
    assert none.spec is None and "easiest key with all hints" in (none.reason or "")
    # never invent: a new key, a changed evaluator, an instruction that is not template + own hints
    invented = {**task, "current_task": {"other": "Do something else."}}
    assert "not a key of task_template" in (
        check_osworld_candidate(invented, _request(task, Goal.HARDER)) or ""
    )
    new_eval = {**task, "evaluator_list": {**task["evaluator_list"], "dir": {"func": "infeasible"}}}
    assert "off-anchor" in (check_osworld_candidate(new_eval, _request(task, Goal.HARDER)) or "")
    reworded = {**task, "current_task": {"dir": "Make a folder 'projects'."}}
    assert "not its template followed by" in (
        check_osworld_candidate(reworded, _request(task, Goal.HARDER)) or ""
    )
    no_hint = {**task, "current_task": {"dir": "Create a folder named 'projects' on the Desktop."}}
    reason = check_osworld_candidate(
        task, _request(no_hint, Goal.HARDER, task)
    )  # adding a hint is not harder
    assert reason == "not harder than the parent: difficulty (0, 0) -> (0, -1)"


def test_osworld_accept_rule_is_the_shared_one_and_rejects_after_acc_0() -> None:
    cfg = AdaptationConfig()  # accept band [0.2, 0.8]
    # Hand-computed (spec §3.3): harder needs 0 < new < prev and new >= 0.2; easier 0 < new, new > prev, new <= 0.8.
    assert accept_variant(0.5, 1.0, "harder", cfg=cfg).accepted
    assert not accept_variant(0.0, 1.0, "harder", cfg=cfg).accepted  # after_acc == 0: rejected
    assert not accept_variant(0.0, 0.0, "easier", cfg=cfg).accepted  # after_acc == 0 even when prev was 0
    assert accept_variant(0.25, 0.0, "easier", cfg=cfg).accepted
    assert not accept_variant(0.1, 1.0, "harder", cfg=cfg).accepted  # below the band's low 0.2
    assert not accept_variant(1.0, 0.0, "easier", cfg=cfg).accepted  # above the band's high 0.8


OFFICIAL = PROJECT_ROOT / "data" / "gui" / "osworld" / "official"


def _meta(
    tmp_path: Path, listing: dict[str, list[str]], examples: dict[tuple[str, str], dict[str, Any]]
) -> Path:
    """A meta list in OSWorld's layout: ``examples/<domain>/<id>.json`` beside it."""
    for (domain, tid), example in examples.items():
        (tmp_path / "examples" / domain).mkdir(parents=True, exist_ok=True)
        (tmp_path / "examples" / domain / f"{tid}.json").write_text(json.dumps(example))
    (tmp_path / "meta.json").write_text(json.dumps(listing))
    return tmp_path / "meta.json"


def _plain(tid: str, instruction: str, **extra: Any) -> dict[str, Any]:
    return {"id": tid, "instruction": instruction, "evaluator": {"func": "infeasible"}, **extra}


def test_an_example_without_config_loads_with_no_set_up(tmp_path: Path) -> None:
    [task] = tasks.load_tasks(_meta(tmp_path, {"os": ["c1"]}, {("os", "c1"): _plain("c1", "Set Python 3.")}))
    assert task["config"] == [] and tasks.desktop_task(task)["config"] == []  # as DesktopEnv reads it
    assert tasks.unavailable(task, tmp_path / "cache") == []


def test_the_same_id_in_two_domains_is_two_tasks_with_their_own_keys_and_cache_folders(
    tmp_path: Path,
) -> None:
    dl = {"type": "download", "parameters": {"files": [{"url": URL, "path": "/home/user/a.txt"}]}}
    meta = _meta(tmp_path, {"chrome": ["x"], "thunderbird": ["x"]}, {
        ("chrome", "x"): _plain("x", "Make Bing the search engine.", config=[dl]),
        ("thunderbird", "x"): _plain("x", "Remove the account.", config=[dl]),
    })  # fmt: skip
    chrome, bird = tasks.load_tasks(meta)
    assert (chrome["domain"], bird["domain"]) == ("chrome", "thunderbird")
    assert (tasks.task_key(chrome), tasks.task_key(bird)) == ("chrome/x", "thunderbird/x")
    cache_dir = tmp_path / "cache"
    assert tasks.task_cache(cache_dir, chrome) == cache_dir / "chrome" / "x"
    assert tasks.task_cache(cache_dir, bird) == cache_dir / "thunderbird" / "x"
    # DesktopEnv's own cache folder is os.path.join(cache_dir, id): the same folders
    assert [tasks.desktop_task(t)["id"] for t in (chrome, bird)] == ["chrome/x", "thunderbird/x"]
    name = f"{uuid.uuid5(uuid.NAMESPACE_URL, URL)}_a.txt"
    assert tasks.missing_files(bird, cache_dir) == [
        f"config[0].parameters.files[0] needs {URL} (not in the cache as {cache_dir / 'thunderbird' / 'x' / name})"
    ]
    # fill: per task (<source>/<domain>/<id>) first, so each task gets its own file
    for domain in ("chrome", "thunderbird"):
        (tmp_path / "src" / domain / "x").mkdir(parents=True)
        (tmp_path / "src" / domain / "x" / "a.txt").write_text(domain)
    assert cache.main(["fill", str(meta), str(tmp_path / "src"), "--cache-dir", str(cache_dir)]) == 0
    assert (cache_dir / "chrome" / "x" / name).read_text() == "chrome"
    assert (cache_dir / "thunderbird" / "x" / name).read_text() == "thunderbird"
    assert tasks.unavailable(chrome, cache_dir) == tasks.unavailable(bird, cache_dir) == []


def test_the_same_domain_and_id_twice_is_an_error_naming_the_file(tmp_path: Path) -> None:
    meta = _meta(tmp_path, {"os": ["x", "x"]}, {("os", "x"): _plain("x", "Do it.")})
    with pytest.raises(OsworldTaskError) as err:
        tasks.load_tasks(meta)
    assert str(err.value).startswith(f"'{meta}' lists the tasks ['os/x'] (domain/id) more than once")
    meta = _meta(tmp_path, {"os": ["y"]}, {("os", "y"): _plain("y", "Do it.", domain="chrome")})
    with pytest.raises(
        OsworldTaskError, match=r"examples/os/y.json: OSWorld task 'y', field domain: 'chrome' is not 'os'"
    ):
        tasks.load_tasks(meta)


def test_the_official_list_loads_and_cache_check_reports_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rla_core.envs.desktop import availability
    from rla_core.envs.desktop.parity import GLOBAL_SHORTCUTS

    loaded = tasks.load_tasks(OFFICIAL / "test_all.json")
    keys = [tasks.task_key(t) for t in loaded]
    # published: 369 entries, 358 ids (11 listed under both chrome and thunderbird), 369 distinct tasks
    assert (len(loaded), len({t["id"] for t in loaded}), len(set(keys))) == (369, 358, 369)
    by_key = dict(zip(keys, loaded, strict=True))
    assert by_key["os/c288e301-e626-4b98-a1ab-159dcb162af5"]["config"] == []  # the example without config

    def categories(key: str) -> set[str]:
        return {r.category for r in tasks.unavailability(by_key[key], tmp_path / "cache")}

    # needs of official os tasks that no installation here changes (hand-read from their JSON)
    assert availability.SOUND in categories("os/28cc3b7e-b194-4bc9-8353-d04c0f4d56d2")  # pactl
    assert availability.SYSTEMD in categories("os/b6781586-6346-41cd-935a-a6b1487918fc")  # timedatectl
    assert availability.GNOME_SHELL in categories("os/ec4e3f68-9ea4-4c18-a5c9-69f89d1178b3")  # favourites
    assert availability.ROOT in categories("os/a462a795-fdc7-4b23-b689-e8b6df786b78")  # sudo su
    assert availability.INSTALLING in categories("os/94d95f96-9699-4208-98ba-3c3119edf9c2")  # Spotify
    # the evaluator's own postconfig opens a terminal with Ctrl+Alt+T
    shortcut = availability.SHORTCUT in categories("os/13584542-872b-42d8-b299-866967b5c3ef")
    assert shortcut == ("ctrl+alt+t" not in GLOBAL_SHORTCUTS)

    assert cache.main(["check", str(OFFICIAL / "test_all.json"), "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    domains = {r[0].strip(): [int(c) for c in r[1:]] for r in rows if len(r) == 4 and r[1].strip().isdigit()}
    assert set(domains) == {"chrome", "gimp", "libreoffice_calc", "libreoffice_impress", "libreoffice_writer",
                            "multi_apps", "os", "thunderbird", "vlc", "vs_code"}  # fmt: skip
    assert sum(n for n, _ok, _bad in domains.values()) == 369 and all(
        n == ok + bad for n, ok, bad in domains.values()
    )
    available = sum(ok for _n, ok, _bad in domains.values())
    assert f"| **all** | **369** | **{available}** | **{369 - available}** |" in out
    assert "| files to download (not in the cache) |" in out and "tasks it keeps out" in out
    assert f"{available} of 369 tasks can run here" in out
    assert "os/c288e301-e626-4b98-a1ab-159dcb162af5: available" not in out  # per-task lines only with --tasks
    assert cache.main(["check", str(OFFICIAL / "test_all.json"), "--cache-dir", str(tmp_path / "cache"),
                       "--tasks", "--require-all"]) == 1  # fmt: skip
    assert "os/c288e301-e626-4b98-a1ab-159dcb162af5: available" in capsys.readouterr().out
