"""The paper's coding benchmarks, read from a user's local copy, as :class:`CodingTask` problems.

Three published layouts (docs/coding-benchmarks.md has the expected files; nothing is downloaded):

* **LiveCodeBench** code-generation release files (``test.jsonl`` … ``test6.jsonl``; ``testN`` holds the
  problems added in ``release_vN``): one problem per row with ``question_id``, ``question_content``,
  ``starter_code``, ``platform``, ``contest_date``, ``public_test_cases`` (a JSON list of ``{input,
  output, testtype}``), ``private_test_cases`` (the same list, either as JSON or packed as base64 of zlib
  of a pickled JSON string) and ``metadata`` (a JSON object; ``func_name`` for functional tests);
* **LiveBench**'s coding category (Parquet, or JSONL): ``question_id``, ``task`` (``LCB_generation`` or
  ``coding_completion``), ``turns`` (the prompt), LiveCodeBench's two test fields, ``original_json``
  (the LiveCodeBench row, whose ``metadata`` names the function), ``partial_solution`` (completion),
  ``livebench_release_date`` and ``livebench_removal_date`` (one release is evaluated, selected as LiveBench
  selects it: :func:`livebench_in_release`);
* **CodeContests** (Parquet, JSONL, or its own JSON export): ``name``, ``description``, ``public_tests`` /
  ``private_tests`` / ``generated_tests`` (``{input: [...], output: [...]}``), ``time_limit``
  (``{seconds, nanos}``), ``memory_limit_bytes``, ``input_file`` / ``output_file``, ``solutions`` /
  ``incorrect_solutions`` (``{language: [...], solution: [...]}``; language 3 is Python 3).

Every problem is graded on all its tests (public + private, plus generated for CodeContests), as the
benchmarks grade: the task's acc is the share of programs passing all of them (spec §0 "acc"). Test types
map onto :class:`TestMethod`: ``stdin`` tests are ``stdio``; ``functional`` tests (one JSON value per
argument line, a JSON expected value) become ``function`` tests kept in that form (``TestForm.JSON``, parsed
when they run) whose prelude lets a LeetCode-style ``class Solution`` answer them. Each task carries its
benchmark's grader, program header, memory limit and own prompt (docs/coding-benchmarks.md#graders), and
its provenance (``source``, ``release``, ``problem_id``): all of it is in the spec, and so in the
registry's task rows and the stage keys.

LiveCodeBench's packed private tests are decoded with :func:`decode_test_cases`: the pickle is read by
an unpickler that refuses every opcode outside plain values (strings, numbers, lists, dicts, …), so a
hostile payload cannot name a class or call anything; it is an error, never executed.

Malformed rows are returned as :class:`InvalidProblem` (file:line or file:row, problem id, field and
reason), like :func:`rla_core.coding.tasks.load_problems`.

Example:
    >>> import json
    >>> row = {"question_id": "q1", "question_title": "Echo", "question_content": "Print the input.",
    ...        "platform": "atcoder", "contest_id": "c", "contest_date": "2024-01-01T00:00:00",
    ...        "starter_code": "", "difficulty": "easy", "metadata": "{}", "private_test_cases": "[]",
    ...        "public_test_cases": json.dumps([{"input": "5", "output": "5", "testtype": "stdin"}])}
    >>> task = livecodebench_task(row, release="release_v1")
    >>> task.task_id, task.test_method.value, task.tests, task.time_limit_s
    ('lcb-q1', 'stdio', (('5', '5'),), 6.0)
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import io
import json
import pickle
import pickletools
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rla_core.algo.graders import LIVECODEBENCH_MEMORY_MB, Grader, codecontests_memory_mb
from rla_core.coding.tasks import CodingTask, InvalidProblem, TestForm, load_problems
from rla_core.config import ProblemFormat
from rla_core.errors import EnvironmentSpecError
from rla_core.store.jsonl import jsonl_lines

# LiveBench and LiveCodeBench grade every test with a 6 s timeout (their runners' default).
BENCHMARK_TIME_LIMIT_S = 6.0
# A packed test blob larger than this once inflated is refused (a zlib bomb), not decompressed.
MAX_DECODED_BYTES = 1 << 30
# CodeContests' language code of Python 3 (its Solution.Language enum).
CODECONTESTS_PYTHON3 = 3
# What LiveCodeBench (and LiveBench, with its copy of the runner) puts before every graded program
# (lcb_runner/evaluation/testing_util.py, docs/coding-benchmarks.md#graders): every name of these modules, in
# this order (a later module's name shadows an earlier one's: builtins restores pow and open), then the
# modules themselves, then a recursion limit of 50 000. LeetCode-style code uses List, deque, ceil, … bare.
LCB_STAR_IMPORTS = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
    "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing",
)  # fmt: skip
LCB_MODULE_IMPORTS = LCB_STAR_IMPORTS[:-2]  # all but builtins and typing
LCB_RECURSION_LIMIT = 50_000
LCB_PROGRAM_HEADER = (
    "".join(f"from {m} import *\n" for m in LCB_STAR_IMPORTS)
    + "".join(f"import {m}\n" for m in LCB_MODULE_IMPORTS)
    + f"sys.setrecursionlimit({LCB_RECURSION_LIMIT})\n\n"
)
# The pickle opcodes of plain values and containers. No GLOBAL/STACK_GLOBAL/INST/OBJ/NEWOBJ/REDUCE/BUILD/
# EXT*/PERSID: nothing that names a class or calls a function.
_PLAIN_OPCODES = frozenset(
    {
        "PROTO", "FRAME", "STOP", "MARK", "POP", "POP_MARK", "DUP", "MEMOIZE",
        "PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET",
        "NONE", "NEWTRUE", "NEWFALSE", "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4",
        "FLOAT", "BINFLOAT", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE",
        "BINUNICODE", "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8",
        "EMPTY_LIST", "APPEND", "APPENDS", "LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
        "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS", "FROZENSET",
    }
)  # fmt: skip


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global at all (second line of defence after the opcode check)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refers to {module}.{name}; only plain values are accepted")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("uses a persistent id; only plain values are accepted")


def plain_unpickle(data: bytes) -> Any:
    """Unpickle ``data`` if it holds only plain values; a :class:`pickle.UnpicklingError` otherwise.

    Every opcode is checked before anything is built, so a payload that would import a module or call a
    function (``GLOBAL``, ``REDUCE``, …) is refused without running any of it.

    Example:
        >>> plain_unpickle(pickle.dumps({"a": [1, 2.5, "x"]}))
        {'a': [1, 2.5, 'x']}
        >>> plain_unpickle(pickle.dumps(print))
        Traceback (most recent call last):
        ...
        _pickle.UnpicklingError: opcode STACK_GLOBAL at byte ... is not a plain value
    """
    try:
        for op, _, pos in pickletools.genops(data):
            if op.name not in _PLAIN_OPCODES:
                raise pickle.UnpicklingError(f"opcode {op.name} at byte {pos} is not a plain value")
    except ValueError as exc:  # pickletools' own "not a pickle" errors
        raise pickle.UnpicklingError(f"not a pickle: {exc}") from None
    return _PlainUnpickler(io.BytesIO(data)).load()


def decode_test_cases(text: Any, *, field: str, max_bytes: int = MAX_DECODED_BYTES) -> list[dict[str, Any]]:
    """LiveCodeBench's test list from its stored form: JSON, or base64 of zlib of a pickled JSON string.

    Returns the list of ``{input, output, testtype}`` objects; raises EnvironmentSpecError naming
    ``field`` when the text is neither form, the pickle holds anything but a string, or a test is not an
    object with string ``input``, ``output`` and ``testtype``.

    Example:
        >>> packed = base64.b64encode(zlib.compress(pickle.dumps('[{"input": "1", "output": "2", '
        ...                                                      '"testtype": "stdin"}]'))).decode()
        >>> decode_test_cases(packed, field="private_test_cases")
        [{'input': '1', 'output': '2', 'testtype': 'stdin'}]
    """
    if not isinstance(text, str):
        raise EnvironmentSpecError(f"field '{field}' must be a string, got {type(text).__name__}")
    try:
        tests = json.loads(text)
    except json.JSONDecodeError:
        tests = json.loads(_unpack(text, field=field, max_bytes=max_bytes))
    if not isinstance(tests, list):
        raise EnvironmentSpecError(f"field '{field}' must hold a list of tests, got {type(tests).__name__}")
    for k, test in enumerate(tests):
        ok = isinstance(test, dict) and all(isinstance(test.get(key), str) for key in ("input", "output"))
        if not ok or test.get("testtype") not in ("stdin", "functional"):
            raise EnvironmentSpecError(
                f"field '{field}[{k}]' must be an object with string input and output and testtype "
                "'stdin' or 'functional'"
            )
    return tests


def _unpack(text: str, *, field: str, max_bytes: int) -> str:
    """The JSON string inside a packed (base64 → zlib → pickle) test field."""
    try:
        packed = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise EnvironmentSpecError(f"field '{field}' is neither JSON nor base64") from None
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(packed, max_bytes)
    except zlib.error as exc:
        raise EnvironmentSpecError(f"field '{field}' is base64 but not zlib data: {exc}") from None
    if inflate.unconsumed_tail:
        raise EnvironmentSpecError(f"field '{field}' inflates past {max_bytes} bytes; refused")
    try:
        value = plain_unpickle(raw)
    except pickle.UnpicklingError as exc:
        raise EnvironmentSpecError(f"field '{field}' holds a refused pickle: {exc}") from None
    except (EOFError, ValueError, IndexError, KeyError) as exc:  # truncated or inconsistent plain pickles
        raise EnvironmentSpecError(f"field '{field}' holds a broken pickle: {exc!r}") from None
    if not isinstance(value, str):
        raise EnvironmentSpecError(
            f"field '{field}' must pickle a JSON string (LiveCodeBench's format), got {type(value).__name__}"
        )
    try:
        json.loads(value)
    except json.JSONDecodeError as exc:
        raise EnvironmentSpecError(f"field '{field}' unpacks to text that is not JSON: {exc}") from None
    return value


def assemble_program(code: str, task: CodingTask) -> str:
    """The program a benchmark grades, from the one the policy wrote.

    LiveBench's completion rule: the partial solution is put before a program that does not already start
    with it; LiveCodeBench's header goes first. Our own problems have neither (the code is unchanged).

    Example:
        >>> from rla_core.coding.tasks import TestMethod
        >>> t = CodingTask("t", "q", TestMethod.STDIO, (("1", "1"),), partial_solution="x = 1")
        >>> assemble_program("print(x)", t)
        'x = 1\\nprint(x)'
    """
    body = code
    if task.partial_solution and not code.startswith(task.partial_solution):
        body = f"{task.partial_solution}\n{code}"
    return task.program_header + body


# ---- reading rows ------------------------------------------------------------------------------------


def read_rows(path: Path) -> Iterator[tuple[str, dict[str, Any] | str]]:
    """(where, row) per row of a JSONL, Parquet or JSON-array file (CodeContests' own JSON export); a row
    that is not an object comes as an error text."""
    if path.suffix == ".parquet":
        import polars as pl

        for k, row in enumerate(pl.read_parquet(path).iter_rows(named=True), start=1):
            yield f"{path.name}:row {k}", row
        return
    if path.suffix == ".json":
        try:
            items = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise EnvironmentSpecError(
                f"'{path}' is not valid JSON ({exc}); a .json file holds one array"
            ) from None
        if not isinstance(items, list):
            raise EnvironmentSpecError(
                f"'{path}' must hold one JSON array of problems, got {type(items).__name__}"
            )
        for k, item in enumerate(items, start=1):
            where = f"{path.name}:item {k}"
            yield (
                where,
                item if isinstance(item, dict) else f"a row must be a JSON object, got {type(item).__name__}",
            )
        return
    for line in jsonl_lines(path):
        where = f"{path.name}:{line.lineno}"
        if line.error is not None:
            yield where, f"not valid JSON: {line.error}"
        elif isinstance(line.value, dict):
            yield where, line.value
        else:
            yield where, f"a row must be a JSON object, got {type(line.value).__name__}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "-", text).strip("-") or "x"


def _problem_id(row: dict[str, Any], key: str, where: str) -> tuple[str, str]:
    """A benchmark row's id (field ``key``) and the place its errors name: the problem, then ``where``."""
    loc = f"problem '{row.get(key)}'" + (f" ({where})" if where else "")
    return _field(row, key, str, loc=loc), loc


def _field(row: dict[str, Any], name: str, kind: type | tuple[type, ...], *, loc: str) -> Any:
    value = row.get(name)
    if not isinstance(value, kind) or (isinstance(value, str) and kind is str and not value.strip()):
        raise EnvironmentSpecError(f"{loc}: field '{name}' is missing or not a non-empty {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join(k.__name__ for k in kinds)


def _date(value: Any) -> str | None:
    if isinstance(value, dt.datetime | dt.date):
        return value.date().isoformat() if isinstance(value, dt.datetime) else value.isoformat()
    return str(value)[:10] if value else None


# ---- LiveCodeBench and LiveBench ---------------------------------------------------------------------


def _json_object(value: Any, *, field: str, loc: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise EnvironmentSpecError(f"{loc}: field '{field}' must be a JSON object")
    return parsed


def _functional_prelude(name: str) -> str:
    # LiveCodeBench calls Solution().<name>(...); a program that defines <name> at top level is called as is.
    return f'if "Solution" in globals() and "{name}" not in globals():\n    {name} = Solution().{name}\n'


def _lcb_spec(
    *,
    loc: str,
    task_id: str,
    question: str,
    public: Any,
    private: Any,
    metadata: dict[str, Any],
    time_limit_s: float,
) -> dict[str, Any]:
    """The CodingTask spec of a LiveCodeBench-style problem (tests and method from its two test fields)."""
    try:
        tests = decode_test_cases(public, field="public_test_cases") + decode_test_cases(
            private, field="private_test_cases"
        )
    except EnvironmentSpecError as exc:
        raise EnvironmentSpecError(f"{loc}: {exc}") from None
    kinds = {t["testtype"] for t in tests}
    if len(kinds) != 1:
        raise EnvironmentSpecError(
            f"{loc}: field 'public_test_cases/private_test_cases' "
            + ("has no tests" if not kinds else f"mixes test types {sorted(kinds)}")
        )
    spec: dict[str, Any] = {"task_id": task_id, "question": question, "time_limit_s": time_limit_s}
    if kinds == {"stdin"}:
        spec |= {"test_method": "stdio", "test_input": [t["input"] for t in tests]}
        spec["test_output"] = [t["output"] for t in tests]
    else:
        name = metadata.get("func_name")
        if not isinstance(name, str) or not name.isidentifier():
            raise EnvironmentSpecError(f"{loc}: field 'metadata.func_name' must name the function under test")
        for k, t in enumerate(tests):
            try:
                json.loads(t["output"])
                for line in t["input"].split("\n"):
                    if line.strip():
                        json.loads(line)
            except json.JSONDecodeError:
                raise EnvironmentSpecError(
                    f"{loc}: field 'test {k}' of a functional problem must hold one JSON value per "
                    "argument line and a JSON expected value"
                ) from None
        # Kept in LiveCodeBench's own form and parsed when each test runs, as LiveCodeBench does.
        spec |= {"test_method": "function", "gt_test_form": TestForm.JSON.value}
        spec |= {"test_input": [t["input"] for t in tests], "test_output": [t["output"] for t in tests]}
        spec |= {"entry_point": name, "test_prelude": _functional_prelude(name)}
    spec |= {"program_header": LCB_PROGRAM_HEADER, "grader": Grader.LIVECODEBENCH.value}
    spec["memory_limit_mb"] = LIVECODEBENCH_MEMORY_MB
    return spec


def _with_starter(question: str, starter: Any) -> str:
    if isinstance(starter, str) and starter.strip():
        return f"{question.rstrip()}\n\nStarter code:\n```python\n{starter.rstrip()}\n```"
    return question


def livecodebench_task(
    row: dict[str, Any], *, release: str, where: str = "", time_limit_s: float = BENCHMARK_TIME_LIMIT_S
) -> CodingTask:
    """One LiveCodeBench code-generation row as a task (tests: public + private, as LCB grades)."""
    qid, loc = _problem_id(row, "question_id", where)
    question = _with_starter(_field(row, "question_content", str, loc=loc), row.get("starter_code"))
    metadata = _json_object(row.get("metadata", "{}"), field="metadata", loc=loc)
    spec = _lcb_spec(
        loc=loc, task_id=f"lcb-{_slug(qid)}", question=question, public=row.get("public_test_cases"),
        private=row.get("private_test_cases"), metadata=metadata, time_limit_s=time_limit_s,
    )  # fmt: skip
    spec |= {"source": "livecodebench", "release": release, "problem_id": qid}
    return CodingTask.from_spec(spec, where=where)


# LiveBench's coding tasks graded by its copy of LiveCodeBench's runner, and those graded by BigCodeBench's
# harness (a unittest suite per question, run with libraries the sandbox does not have): the latter are counted
# and left out, not reported as malformed.
LIVEBENCH_TASKS = ("LCB_generation", "coding_completion")
LIVEBENCH_UNSUPPORTED_TASKS = ("code_generation", "code_completion")


def livebench_task(
    row: dict[str, Any], *, where: str = "", time_limit_s: float = BENCHMARK_TIME_LIMIT_S
) -> CodingTask:
    """One LiveBench coding row as a task: the policy sees its first turn as is (LiveBench's own prompt, with
    its one answer instruction); the reward model the problem itself; completion rows keep their prefix."""
    qid, loc = _problem_id(row, "question_id", where)
    kind = row.get("task")
    if kind not in LIVEBENCH_TASKS:
        raise EnvironmentSpecError(
            f"{loc}: field 'task' is {kind!r}; the LiveCodeBench-graded coding tasks are {list(LIVEBENCH_TASKS)}"
        )
    turns = row.get("turns")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
        raise EnvironmentSpecError(f"{loc}: field 'turns' must be a list whose first entry is the prompt")
    original = _json_object(row.get("original_json"), field="original_json", loc=loc)
    metadata = _json_object(original.get("metadata") or "{}", field="original_json.metadata", loc=loc)
    content = original.get("question_content")
    question = (
        _with_starter(content, original.get("starter_code"))
        if isinstance(content, str) and content.strip()
        else turns[0]
    )
    spec = _lcb_spec(
        loc=loc, task_id=f"livebench-{_slug(qid)}", question=question, public=row.get("public_test_cases"),
        private=row.get("private_test_cases"), metadata=metadata, time_limit_s=time_limit_s,
    )  # fmt: skip
    partial = row.get("partial_solution") if kind == "coding_completion" else None
    if kind == "coding_completion" and (not isinstance(partial, str) or not partial.strip()):
        raise EnvironmentSpecError(f"{loc}: field 'partial_solution' must be the code to complete")
    release = _date(row.get("livebench_release_date") or row.get("release_date"))
    spec |= {"source": "livebench", "release": release, "problem_id": qid, "partial_solution": partial}
    spec["prompt"] = turns[0]
    if isinstance(row.get("solution"), str) and row["solution"].strip():
        spec["solution"] = row["solution"]
    return CodingTask.from_spec(spec, where=where)


def livebench_in_release(release_date: str, removal_date: str | None, release: str) -> bool:
    """LiveBench's rule for a question in ``release`` (its load_questions): released at or before it and not
    removed by then (no removal date, or a later one). Dates are ``YYYY-MM-DD`` strings.

    Example:
        >>> livebench_in_release("2024-06-24", "2024-11-25", "2024-08-31")
        True
        >>> livebench_in_release("2024-06-24", "2024-11-25", "2024-11-25")
        False
    """
    return release_date <= release and (not removal_date or removal_date > release)


def _livebench_selection(
    rows: list[tuple[str, dict[str, Any]]], release: str
) -> tuple[list[tuple[str, dict[str, Any]]], str, dict[str, int], list[InvalidProblem]]:
    """The rows of a LiveBench file in ``release`` (empty: the newest in the file), the release, what was
    left out (reason → count) and the rows without a release date."""
    dated: list[tuple[str, dict[str, Any], str]] = []
    invalid: list[InvalidProblem] = []
    for where, row in rows:
        date = _date(row.get("livebench_release_date"))
        if date is None:
            pid = row.get("question_id")
            reason = f"problem '{pid}' ({where}): field 'livebench_release_date' is missing"
            invalid.append(InvalidProblem(where, pid if isinstance(pid, str) else None, reason))
        else:
            dated.append((where, row, date))
    releases = sorted({date for _, _, date in dated})
    chosen = release or (releases[-1] if releases else "")
    if release and release not in releases:
        raise EnvironmentSpecError(
            f"coding.livebench_release '{release}' is not a release of this LiveBench file; its releases "
            f"are {releases}. Set one of them, or leave it empty for the newest"
        )
    kept: list[tuple[str, dict[str, Any]]] = []
    left_out: dict[str, int] = {}
    for where, row, date in dated:
        removal = _date(row.get("livebench_removal_date"))
        if not livebench_in_release(date, removal, chosen):
            why = f"added after release {chosen}" if date > chosen else f"removed by release {chosen}"
            left_out[why] = left_out.get(why, 0) + 1
        elif row.get("task") in LIVEBENCH_UNSUPPORTED_TASKS:
            why = f"task '{row['task']}' (BigCodeBench-style tests): not supported yet"
            left_out[why] = left_out.get(why, 0) + 1
        else:
            kept.append((where, row))
    return kept, chosen, left_out, invalid


# ---- CodeContests ------------------------------------------------------------------------------------


def _io_lists(row: dict[str, Any], name: str, *, loc: str) -> tuple[list[str], list[str]]:
    value = row.get(name)
    if value is None:
        return [], []
    if isinstance(value, list) and all(isinstance(t, dict) for t in value):
        # CodeContests' own JSON export (convert_riegeli_to_json.py): a list of {input, output}.
        value = {"input": [t.get("input") for t in value], "output": [t.get("output") for t in value]}
    ins, outs = (value.get("input"), value.get("output")) if isinstance(value, dict) else (None, None)
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
        raise EnvironmentSpecError(f"{loc}: field '{name}' must hold equal-length 'input' and 'output' lists")
    return ins, outs


_DURATION_TEXT = re.compile(r"\s*(?:seconds:\s*(-?\d+)\s*)?(?:nanos:\s*(-?\d+)\s*)?")


def _time_limit(value: Any, *, loc: str, default: float) -> float:
    if value is None or value == "":
        return default
    if isinstance(value, str):
        # The JSON export writes the Duration message as protobuf text: "seconds: 2\nnanos: 500000000\n".
        text = _DURATION_TEXT.fullmatch(value)
        if text is None:
            raise EnvironmentSpecError(
                f"{loc}: field 'time_limit' text must be 'seconds: S nanos: N', got {value!r}"
            )
        value = {"seconds": int(text.group(1) or 0), "nanos": int(text.group(2) or 0)}
    if not isinstance(value, dict):
        raise EnvironmentSpecError(f"{loc}: field 'time_limit' must be {{seconds, nanos}} or null")
    seconds, nanos = value.get("seconds") or 0, value.get("nanos") or 0
    if not isinstance(seconds, int) or not isinstance(nanos, int):
        raise EnvironmentSpecError(f"{loc}: field 'time_limit' must have integer seconds and nanos")
    limit = seconds + nanos / 1e9
    return limit if limit > 0 else default


def _python_solutions(value: Any) -> list[str]:
    """The Python 3 solutions of a ``solutions`` field: {language: [...], solution: [...]} (Hugging Face) or a
    list of {language, solution} (CodeContests' JSON export)."""
    if isinstance(value, list):
        pairs = [(s.get("language"), s.get("solution")) for s in value if isinstance(s, dict)]
    elif isinstance(value, dict):
        pairs = list(zip(value.get("language") or [], value.get("solution") or [], strict=False))
    else:
        pairs = []
    return [code for lang, code in pairs if lang == CODECONTESTS_PYTHON3 and isinstance(code, str)]


def codecontests_task(
    row: dict[str, Any], *, release: str, where: str = "", time_limit_s: float = BENCHMARK_TIME_LIMIT_S
) -> CodingTask:
    """One CodeContests row as a stdio task: public + private + generated tests, its own time and memory
    limits, its input and output files where it names them; graded by CodeContests' rules."""
    name, loc = _problem_id(row, "name", where)
    description = _field(row, "description", str, loc=loc)
    ins: list[str] = []
    outs: list[str] = []
    for part in ("public_tests", "private_tests", "generated_tests"):
        i, o = _io_lists(row, part, loc=loc)
        ins, outs = ins + i, outs + o
    python = _python_solutions(row.get("solutions"))
    memory = row.get("memory_limit_bytes")
    if memory is not None and (not isinstance(memory, int) or isinstance(memory, bool) or memory < 0):
        raise EnvironmentSpecError(
            f"{loc}: field 'memory_limit_bytes' must be a non-negative integer or null"
        )
    spec = {
        "task_id": f"cc-{_slug(name)}", "question": description, "test_method": "stdio",
        "test_input": ins, "test_output": outs,
        "time_limit_s": _time_limit(row.get("time_limit"), loc=loc, default=time_limit_s),
        "solution": python[0] if python else None,
        "source": "codecontests", "release": release, "problem_id": name,
        "grader": Grader.CODECONTESTS.value, "memory_limit_mb": codecontests_memory_mb(memory),
        "input_file": row.get("input_file") or "", "output_file": row.get("output_file") or "",
    }  # fmt: skip
    return CodingTask.from_spec(spec, where=where)


# ---- one entry point ---------------------------------------------------------------------------------


def release_of(path: Path, fmt: ProblemFormat) -> str:
    """The release a file holds, from its published name: LiveCodeBench ``testN.jsonl`` → ``release_vN``
    (``test.jsonl`` is release_v1); a Hugging Face split file ``test-00000-of-00001.parquet`` → ``test``;
    CodeContests' JSON export ``code_contests_valid.json`` → ``valid``."""
    stem = path.name.split(".", 1)[0]
    match = re.fullmatch(r"test(\d*)", stem)
    if fmt is ProblemFormat.LIVECODEBENCH and match:
        return f"release_v{match.group(1) or 1}"
    return stem.split("-", 1)[0].removeprefix("code_contests_")


@dataclass(frozen=True)
class BenchmarkFile:
    """What :func:`load_benchmark` read: the problems, the malformed rows, how many problems each release
    gave, and the rows left out on purpose (reason → count: LiveBench questions outside the release, tasks
    not supported yet)."""

    tasks: list[CodingTask]
    invalid: list[InvalidProblem]
    per_release: dict[str, int] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    release: str | None = None  # LiveBench: the release evaluated

    def summary(self) -> str:
        """One line for the log: problems per release, then what was left out and why."""
        loaded = ", ".join(f"{r}: {n}" for r, n in sorted(self.per_release.items()))
        line = f"{len(self.tasks)} problems loaded ({loaded or 'none'})"
        if self.release is not None:
            line = f"LiveBench release {self.release}: {line}"
        if self.left_out:
            line += "; left out: " + ", ".join(f"{n} {why}" for why, n in sorted(self.left_out.items()))
        return line


def load_benchmark(
    path: str | Path,
    fmt: ProblemFormat,
    *,
    time_limit_s: float = BENCHMARK_TIME_LIMIT_S,
    limit: int = 0,
    livebench_release: str = "",
) -> BenchmarkFile:
    """Problems of a local benchmark file in format ``fmt`` (JSONL, Parquet, or CodeContests' JSON export);
    malformed rows returned.

    ``time_limit_s``: the per-test limit of rows that carry none. ``limit``: keep the first N valid
    problems (0: all). ``livebench_release``: the LiveBench release evaluated (empty: the newest in the
    file), selected as LiveBench does (:func:`livebench_in_release`). Raises EnvironmentSpecError only when
    the file is missing, two problems share an id, or the release is not one of the file's. ``fmt`` ``rla``
    is our own JSONL (:func:`load_problems`).
    """
    p = Path(path)
    if fmt is ProblemFormat.RLA:
        ours, bad = load_problems(p)
        return BenchmarkFile(ours[:limit] if limit else ours, bad)
    if not p.is_file():
        raise EnvironmentSpecError(
            f"{fmt} file '{p}' does not exist; docs/coding-benchmarks.md shows where the files go"
        )
    release = release_of(p, fmt)
    make: dict[ProblemFormat, Callable[[dict[str, Any], str], CodingTask]] = {
        ProblemFormat.LIVECODEBENCH: lambda r, w: livecodebench_task(
            r, release=release, where=w, time_limit_s=time_limit_s
        ),
        ProblemFormat.LIVEBENCH: lambda r, w: livebench_task(r, where=w, time_limit_s=time_limit_s),
        ProblemFormat.CODECONTESTS: lambda r, w: codecontests_task(
            r, release=release, where=w, time_limit_s=time_limit_s
        ),
    }
    tasks: list[CodingTask] = []
    invalid: list[InvalidProblem] = []
    rows: list[tuple[str, dict[str, Any]]] = []
    for where, row in read_rows(p):
        if isinstance(row, str):
            invalid.append(InvalidProblem(where, None, row))
        else:
            rows.append((where, row))
    left_out: dict[str, int] = {}
    chosen: str | None = None
    if fmt is ProblemFormat.LIVEBENCH:
        rows, chosen, left_out, undated = _livebench_selection(rows, livebench_release)
        invalid += undated
    seen: set[str] = set()
    per_release: dict[str, int] = {}
    for where, row in rows:
        try:
            task = make[fmt](row, where)
        except EnvironmentSpecError as exc:
            pid = row.get("question_id", row.get("name"))
            invalid.append(InvalidProblem(where, pid if isinstance(pid, str) else None, str(exc)))
            continue
        if task.task_id in seen:
            raise EnvironmentSpecError(
                f"{where}: duplicate problem id '{task.problem_id}'; ids must be unique"
            )
        seen.add(task.task_id)
        if not limit or len(tasks) < limit:
            tasks.append(task)
            key = task.release or "?"
            per_release[key] = per_release.get(key, 0) + 1
    return BenchmarkFile(tasks, invalid, per_release, left_out, chosen)
