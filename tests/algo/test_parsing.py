"""Parsing of model outputs (spec §5): realistic judge, policy, env-model and UT-generator texts."""

from __future__ import annotations

import pytest

from rla_core.algo.parsing import (
    Parsed,
    extract_code_block,
    fallback_action_index,
    last_boxed,
    parse_action_index,
    parse_boxed_score,
    parse_last_json_object,
    parse_unit_test,
)


class TestLastBoxed:
    def test_takes_the_last_box(self) -> None:
        assert last_boxed(r"first \boxed{1} then \boxed{-1}.") == "-1"

    def test_keeps_nested_braces(self) -> None:
        assert last_boxed(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"

    def test_missing_and_unbalanced(self) -> None:
        assert last_boxed("no box here") is None
        assert last_boxed(r"\boxed{1") is None

    def test_empty_box(self) -> None:
        assert last_boxed(r"\boxed{}") == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"The action makes progress. \boxed{1}", 1),
        (r"Reasoning... Final score: \boxed{+1}", 1),
        (r"The index is out of range. \boxed{-1}", -1),
        ("The agent hallucinated. \\boxed{\u22121}", -1),  # unicode minus
        ("Undone progress. \\boxed{\u20131}", -1),  # en dash
        (r"\boxed{ 1 }", 1),  # surrounding spaces are stripped
        (r"score \boxed{Score: +1}", 1),  # exactly one ±1 integer among words
        (r"\boxed{step 3 gets -1}", -1),  # one ±1 among other integers
        (r"draft \boxed{-1} ... on reflection \boxed{1}", 1),  # last box wins
    ],
)
def test_boxed_score_tolerant_valid(text: str, expected: int) -> None:
    parsed = parse_boxed_score(text)
    assert parsed == Parsed(value=expected, valid=True, reason=None, raw=parsed.raw)


@pytest.mark.parametrize(
    ("text", "reason_part"),
    [
        ("I think the step is good.", "no \\boxed{}"),
        (r"\boxed{1/8}", "fraction"),  # fractions are invalid, never 1
        (r"\boxed{Attempt 1/8: 1}", "fraction"),
        (r"\boxed{+1 or -1}", "ambiguous"),  # two ±1 values
        (r"\boxed{0}", "no +1/-1"),
        (r"\boxed{10}", "no +1/-1"),  # 10 is not 1
        (r"\boxed{good}", "no +1/-1"),
        (r"\boxed{}", "empty"),
        (r"\boxed{1", "unbalanced"),
    ],
)
def test_boxed_score_tolerant_invalid(text: str, reason_part: str) -> None:
    parsed = parse_boxed_score(text)
    assert not parsed.valid
    assert parsed.value is None
    assert parsed.reason is not None and reason_part in parsed.reason


@pytest.mark.parametrize(
    ("text", "expected"),
    [(r"\boxed{1}", 1), (r"\boxed{+1}", 1), (r"\boxed{-1}", -1), (r"\boxed{ -1 }", -1)],
)
def test_boxed_score_strict_valid(text: str, expected: int) -> None:
    assert parse_boxed_score(text, strict=True).value == expected


@pytest.mark.parametrize(
    "text",
    [r"\boxed{Score: +1}", "\\boxed{\u22121}", r"\boxed{1.0}", r"\boxed{+-1}", r"\boxed{11}", "no box"],
)
def test_boxed_score_strict_rejects_what_tolerant_might_accept(text: str) -> None:
    parsed = parse_boxed_score(text, strict=True)
    assert not parsed.valid and parsed.value is None and parsed.reason


class TestActionIndex:
    def test_valid_index(self) -> None:
        text = "I should open the fridge first.\nAnswer: \\boxed{2}"
        assert parse_action_index(text, 4).value == 2

    def test_first_integer_inside_the_last_box(self) -> None:
        # reference safe_to_index: the first integer of the box content
        assert parse_action_index(r"\boxed{3) go to fridge 1}", 5).value == 3

    def test_out_of_range_is_invalid_and_clamped_by_the_fallback(self) -> None:
        parsed = parse_action_index(r"\boxed{7}", 4)
        assert not parsed.valid and parsed.reason == "index 7 out of range 0..3"
        # fallback clamps 7 into 0..3 -> 3
        assert fallback_action_index(parsed, 4) == 3

    def test_negative_index_clamps_to_zero(self) -> None:
        parsed = parse_action_index(r"\boxed{-2}", 4)
        assert not parsed.valid
        assert fallback_action_index(parsed, 4) == 0

    def test_missing_box_defaults_to_zero(self) -> None:
        parsed = parse_action_index("I will go north.", 3)
        assert parsed.reason == "no \\boxed{}"
        assert fallback_action_index(parsed, 3) == 0

    def test_box_without_integer_defaults_to_zero(self) -> None:
        parsed = parse_action_index(r"\boxed{go north}", 3)
        assert parsed.reason is not None and "no integer" in parsed.reason
        assert fallback_action_index(parsed, 3) == 0

    def test_valid_index_is_kept_by_the_fallback(self) -> None:
        assert fallback_action_index(parse_action_index(r"\boxed{1}", 3), 3) == 1

    def test_zero_actions_is_a_caller_error(self) -> None:
        with pytest.raises(ValueError, match="at least one admissible action"):
            parse_action_index(r"\boxed{0}", 0)


class TestLastJsonObject:
    def test_env_model_output_with_thinking_and_final_json(self) -> None:
        text = (
            "<think>Let me draft {not json} first.</think>\n"
            'Draft: {"question": "old"}\n'
            'Final:\n```json\n{"question": "Sum two numbers", "test_input": ["1 2"], "test_output": ["3"]}\n```'
        )
        parsed = parse_last_json_object(text)
        assert parsed.valid
        assert parsed.value == {"question": "Sum two numbers", "test_input": ["1 2"], "test_output": ["3"]}

    def test_braces_inside_strings(self) -> None:
        text = 'answer {"code": "def f(): return {1: \'}\'}", "n": 2}'
        assert parse_last_json_object(text).value == {"code": "def f(): return {1: '}'}", "n": 2}

    def test_nested_object_is_returned_whole(self) -> None:
        assert parse_last_json_object('x {"a": {"b": 1}} y').value == {"a": {"b": 1}}

    def test_last_parsable_object_when_a_later_one_is_broken(self) -> None:
        parsed = parse_last_json_object('{"ok": 1} then {"broken": ,}')
        assert parsed.value == {"ok": 1}

    def test_no_object(self) -> None:
        assert parse_last_json_object("no json at all").reason == "no '{' in text"
        assert parse_last_json_object("{broken").reason == "no balanced {...} parses as a JSON object"
        assert not parse_last_json_object("[1, 2, 3]").valid


class TestCodeBlock:
    def test_last_python_block(self) -> None:
        text = (
            "Plan.\n```python\nprint(1)\n```\nBetter:\n```python\nn = int(input())\nprint(n * 2)\n```\nDone."
        )
        assert extract_code_block(text).value == "n = int(input())\nprint(n * 2)"

    def test_py_and_bare_fences_count(self) -> None:
        assert extract_code_block("```py\nprint(3)\n```").value == "print(3)"
        assert extract_code_block("```\nprint(4)\n```").value == "print(4)"

    def test_other_languages_are_skipped(self) -> None:
        text = "```python\nprint(5)\n```\n```bash\nls -la\n```"
        assert extract_code_block(text).value == "print(5)"

    def test_missing_or_empty(self) -> None:
        assert not extract_code_block("just prose").valid
        assert not extract_code_block("```bash\nls\n```").valid
        parsed = extract_code_block("```python\n   \n```")
        assert not parsed.valid and parsed.reason is not None and "empty" in parsed.reason

    def test_unclosed_fence_is_not_a_block(self) -> None:
        assert not extract_code_block("```python\nprint(1)\n").valid


class TestUnitTest:
    def test_realistic_generator_output(self) -> None:
        text = (
            "Let me think step by step. For n = 4 the answer is 10.\n\n"
            "**Test Input:**\n```\n4\n1 2 3 4\n```\n\n"
            "**Test Output:**\n```\n10\n```\n\n"
            "**Explanation:** 1+2+3+4 = 10."
        )
        assert parse_unit_test(text).value == ("4\n1 2 3 4", "10")

    def test_last_blocks_are_taken(self) -> None:
        text = (
            "**Test Input:**\n```\n1\n```\n**Test Output:**\n```\n1\n```\n"
            "Wait, let me fix that.\n"
            "**Test Input:**\n```text\n2\n```\n**Test Output:**\n```text\n4\n```"
        )
        assert parse_unit_test(text).value == ("2", "4")

    def test_missing_or_empty_blocks_are_invalid(self) -> None:
        assert parse_unit_test("**Test Input:**\n```\n1\n```").reason == "no **Test Output:** code block"
        assert parse_unit_test("nothing").reason == "no **Test Input:** code block"
        empty = "**Test Input:**\n```\n\n```\n**Test Output:**\n```\n3\n```"
        assert parse_unit_test(empty).reason == "the **Test Input:** block is empty"
