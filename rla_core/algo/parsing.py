"""Parsing of model outputs: judge scores, action indices, JSON objects, code blocks, unit tests.

Every parser returns a :class:`Parsed` value: ``valid`` says whether the text had the expected
shape, ``value`` holds the parsed value (``None`` when invalid) and ``reason`` says why it was
rejected. Parsers never raise on malformed model output; the caller records the reason and applies
the spec's fallback (spec §5, docs/architecture.md#the-design-contract: "an unparsable action is recorded ... never silent").

Example:
    >>> parse_boxed_score(r"The step is fine. \\boxed{+1}").value
    1
    >>> parse_action_index(r"I pick \\boxed{7}", 4).reason
    'index 7 out of range 0..3'
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

_BOXED_TAG = "\\boxed{"
# Unicode minus and en dash, which models write for "-1" (reference `parse_binary_reward_from_output`).
_MINUS_LOOKALIKES = ("\u2212", "\u2013")
_FRACTION = re.compile(r"\d+\s*/\s*\d+")
_INTEGER = re.compile(r"[-+]?\d+")
_STRICT_SCORE = re.compile(r"[+-]?1")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_LANGUAGE_ALIASES: dict[str, frozenset[str]] = {
    "python": frozenset({"python", "py", "python3"}),
}
_TEST_INPUT = re.compile(r"\*\*Test Input:?\*\*:?\s*```[^\n]*\n(.*?)```", re.DOTALL)
_TEST_OUTPUT = re.compile(r"\*\*Test Output:?\*\*:?\s*```[^\n]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Parsed(Generic[T]):
    """Result of parsing one model output.

    ``raw`` is the fragment the parser looked at (e.g. the content of the last ``\\boxed{}``), kept
    so that a caller's fallback can use it (see :func:`fallback_action_index`).
    """

    value: T | None
    valid: bool
    reason: str | None
    raw: str | None = None

    @staticmethod
    def ok(value: T, *, raw: str | None = None) -> Parsed[T]:
        """A valid result."""
        return Parsed(value=value, valid=True, reason=None, raw=raw)

    @staticmethod
    def fail(reason: str, *, raw: str | None = None) -> Parsed[T]:
        """An invalid result with the reason."""
        return Parsed(value=None, valid=False, reason=reason, raw=raw)


def last_boxed(text: str) -> str | None:
    """Content of the last balanced ``\\boxed{...}`` in ``text``; ``None`` if absent or unbalanced.

    Nested braces inside the box are kept (``\\boxed{\\frac{1}{2}}`` gives ``\\frac{1}{2}``).

    Example:
        >>> last_boxed(r"\\boxed{1} then \\boxed{a{b}c}")
        'a{b}c'
    """
    start = text.rfind(_BOXED_TAG)
    if start < 0:
        return None
    i = start + len(_BOXED_TAG)
    depth = 1
    while i < len(text):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start + len(_BOXED_TAG) : i]
        i += 1
    return None


def _boxed_or_fail(text: str) -> tuple[str | None, str | None]:
    """(content, None) or (None, reason)."""
    if _BOXED_TAG not in text:
        return None, "no \\boxed{}"
    content = last_boxed(text)
    if content is None:
        return None, "unbalanced braces in the last \\boxed{"
    return content, None


def parse_boxed_score(text: str, *, strict: bool = False) -> Parsed[int]:
    """Parse a binary judge score (+1 / -1) from the last ``\\boxed{}`` (spec §5).

    Tolerant rules (AlfWorld judge, reference ``parse_binary_reward_from_output``): after mapping
    unicode minus signs to ``-``, exactly ``1`` / ``+1`` / ``-1`` is taken; any fraction (``1/8``)
    is invalid; otherwise, if exactly one ±1 integer appears, it is used; anything else is invalid.
    ``strict=True`` (OSWorld judge): the stripped content must match ``[+-]?1``.

    The caller stores an invalid score as null; it counts as 0 in the policy mean and gets the
    invalid-format penalty in the reward-model reward (spec §2.1, §2.2).

    Example:
        >>> parse_boxed_score(r"\\boxed{\u22121}").value
        -1
        >>> parse_boxed_score(r"\\boxed{1/8}").reason
        'fraction in \\\\boxed{1/8}'
    """
    content, reason = _boxed_or_fail(text)
    if content is None:
        return Parsed.fail(reason or "no \\boxed{}")
    s = content.strip()
    if strict:
        if _STRICT_SCORE.fullmatch(s):
            return Parsed.ok(-1 if s.startswith("-") else 1, raw=content)
        return Parsed.fail(f"\\boxed{{{s}}} is not +1 or -1 (strict)", raw=content)
    for lookalike in _MINUS_LOOKALIKES:
        s = s.replace(lookalike, "-")
    if s in ("1", "+1"):
        return Parsed.ok(1, raw=content)
    if s == "-1":
        return Parsed.ok(-1, raw=content)
    if not s:
        return Parsed.fail("empty \\boxed{}", raw=content)
    if _FRACTION.search(s):
        return Parsed.fail(f"fraction in \\boxed{{{s}}}", raw=content)
    signals = [v for v in (int(x) for x in _INTEGER.findall(s)) if v in (-1, 1)]
    if len(signals) == 1:
        return Parsed.ok(signals[0], raw=content)
    if not signals:
        return Parsed.fail(f"no +1/-1 in \\boxed{{{s}}}", raw=content)
    return Parsed.fail(f"ambiguous: {len(signals)} +1/-1 values in \\boxed{{{s}}}", raw=content)


def parse_action_index(text: str, n_actions: int) -> Parsed[int]:
    """Parse the 0-based action index from the last ``\\boxed{}`` (spec §5, AlfWorld policy).

    The first integer inside the last box is the index (reference ``safe_to_index``). Invalid when
    there is no box, no integer in it, or the index lies outside ``0..n_actions-1``; the caller
    then applies :func:`fallback_action_index` and records ``action_valid = False``.

    Example:
        >>> parse_action_index(r"go east: \\boxed{2}", 3).value
        2
    """
    if n_actions < 1:
        raise ValueError(f"n_actions={n_actions}: an episode step needs at least one admissible action")
    content, reason = _boxed_or_fail(text)
    if content is None:
        return Parsed.fail(reason or "no \\boxed{}")
    match = _INTEGER.search(content)
    if match is None:
        return Parsed.fail(f"no integer in \\boxed{{{content.strip()}}}", raw=content)
    index = int(match.group(0))
    if not 0 <= index < n_actions:
        return Parsed.fail(f"index {index} out of range 0..{n_actions - 1}", raw=content)
    return Parsed.ok(index, raw=content)


def fallback_action_index(parsed: Parsed[int], n_actions: int) -> int:
    """The action index to play for a parse result (spec §5: default 0, clamped to range).

    A valid result is returned as is. An invalid one whose box held an integer is clamped into
    ``0..n_actions-1`` (reference ``map_idxlist_to_actions``); one without an integer gives 0.

    Example:
        >>> fallback_action_index(parse_action_index(r"\\boxed{9}", 4), 4)
        3
    """
    if n_actions < 1:
        raise ValueError(f"n_actions={n_actions}: an episode step needs at least one admissible action")
    if parsed.valid and parsed.value is not None:
        return parsed.value
    match = _INTEGER.search(parsed.raw) if parsed.raw is not None else None
    index = int(match.group(0)) if match is not None else 0
    return max(0, min(index, n_actions - 1))


def parse_last_json_object(text: str) -> Parsed[dict[str, Any]]:
    """The last top-level ``{...}`` in ``text`` that parses as a JSON object (spec §3.1 validity).

    Braces inside JSON strings are handled by the JSON decoder itself. Candidates are scanned left
    to right; after a successful parse the scan resumes after that object, so nested objects of a
    parsed object are never returned on their own.

    Example:
        >>> parse_last_json_object('draft {"a": 1} final {"q": "x}y"}').value
        {'q': 'x}y'}
    """
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    found_raw: str | None = None
    i = text.find("{")
    while i >= 0:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict):
            found, found_raw = obj, text[i:end]
        i = text.find("{", end)
    if found is None:
        reason = "no '{' in text" if "{" not in text else "no balanced {...} parses as a JSON object"
        return Parsed.fail(reason)
    return Parsed.ok(found, raw=found_raw)


def extract_code_block(text: str, *, language: str = "python") -> Parsed[str]:
    """The last fenced code block tagged ``language`` (or an alias, e.g. ``py``) or untagged (spec §5).

    Blocks tagged with another language are skipped. The code is returned without the fences and
    without trailing whitespace; an empty block is invalid.

    Example:
        >>> extract_code_block("```python\\nprint(1)\\n```\\n```\\nprint(2)\\n```").value
        'print(2)'
    """
    accepted = _LANGUAGE_ALIASES.get(language.lower(), frozenset({language.lower()})) | {""}
    blocks = [body for tag, body in _FENCE.findall(text) if tag.lower() in accepted]
    if not blocks:
        return Parsed.fail(f"no ```{language} (or untagged) fenced block")
    code = blocks[-1].rstrip()
    if not code.strip():
        return Parsed.fail(f"the last ```{language} block is empty", raw=blocks[-1])
    return Parsed.ok(code, raw=blocks[-1])


def parse_unit_test(text: str) -> Parsed[tuple[str, str]]:
    """A generated unit test ``(input, output)`` from ``**Test Input:**`` / ``**Test Output:**`` blocks.

    Spec §5 (coding UT generator): the last input block and the last output block are taken; their
    contents are stripped of surrounding whitespace. A missing or empty block makes the test invalid
    ("Invalid Test", which fails every program, spec §1.1 step 3).

    Example:
        >>> t = "**Test Input:**\\n```\\n3\\n```\\n**Test Output:**\\n```\\n9\\n```"
        >>> parse_unit_test(t).value
        ('3', '9')
    """
    inputs = _TEST_INPUT.findall(text)
    outputs = _TEST_OUTPUT.findall(text)
    if not inputs:
        return Parsed.fail("no **Test Input:** code block")
    if not outputs:
        return Parsed.fail("no **Test Output:** code block")
    test_input, test_output = inputs[-1].strip(), outputs[-1].strip()
    if not test_input:
        return Parsed.fail("the **Test Input:** block is empty")
    if not test_output:
        return Parsed.fail("the **Test Output:** block is empty")
    return Parsed.ok((test_input, test_output))
