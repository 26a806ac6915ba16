"""Prompt templates of the coding setting (spec §5), versioned by a content hash.

Kept short (well under 400 tokens with a typical problem) so that tiny CPU models can use them, but
faithful to the reference wording: the policy thinks, then writes a python script (stdio) or the
function (function method) in a python block; the reward model is a "rigorous unit-test designer" that
writes exactly ONE correct and discriminative test as ``**Test Input:**`` / ``**Test Output:**`` blocks
followed by ``**Explanation:**``.

Example:
    >>> "```python" in policy_prompt("Print 1.", test_method=TestMethod.STDIO)
    True
"""

from __future__ import annotations

import hashlib

from rla_core.coding.tasks import CodingTask, TestMethod

POLICY_STDIO = (
    "Solve the programming problem below. Think step by step, then write a complete python script "
    "that reads the input with input() and prints the answer with print(). Put the final code in one "
    "```python block.\n\n### Problem\n{question}\n\n### Answer\n"
)
POLICY_FUNCTION = (
    "Solve the programming problem below. Think step by step, then write the complete python function "
    "`{entry_point}` (with any imports it needs). Put the final code in one ```python block.\n\n"
    "### Problem\n{question}\n\n### Answer\n"
)
UNIT_TEST_STDIO = (
    "You are a rigorous unit-test designer. Write exactly ONE correct and discriminative unit test for "
    "the problem below: choose an input whose correct output you can compute reliably step by step, and "
    "that a wrong program would likely fail.\n\n### Problem\n{question}\n\n"
    "Reason step by step, then answer in exactly this format:\n"
    "**Test Input:**\n```\n<the full stdin>\n```\n**Test Output:**\n```\n<the exact expected stdout>\n```\n"
    "**Explanation:** <one sentence>\n"
)
UNIT_TEST_FUNCTION = (
    "You are a rigorous unit-test designer. Write exactly ONE correct and discriminative unit test for "
    "the function `{entry_point}` below: choose a call whose correct result you can compute reliably step "
    "by step, and that a wrong implementation would likely fail.\n\n### Problem\n{question}\n\n"
    "Reason step by step, then answer in exactly this format (the test is "
    "`assert <call> == <expected>`):\n"
    "**Test Input:**\n```\n<a python call, e.g. {entry_point}(...)>\n```\n"
    "**Test Output:**\n```\n<the expected value as a python literal>\n```\n"
    "**Explanation:** <one sentence>\n"
)

TEMPLATES: dict[str, str] = {
    "policy_stdio": POLICY_STDIO,
    "policy_function": POLICY_FUNCTION,
    "unit_test_stdio": UNIT_TEST_STDIO,
    "unit_test_function": UNIT_TEST_FUNCTION,
}


def template_version(name: str) -> str:
    """First 12 hex digits of the sha256 of template ``name`` (changes whenever its text changes)."""
    return hashlib.sha256(TEMPLATES[name].encode("utf-8")).hexdigest()[:12]


def policy_prompt(question: str, *, test_method: TestMethod, entry_point: str | None = None) -> str:
    """The policy prompt for one problem (spec §5 "Coding policy")."""
    if test_method is TestMethod.STDIO:
        return POLICY_STDIO.format(question=question.strip())
    return POLICY_FUNCTION.format(question=question.strip(), entry_point=entry_point or "solution")


def task_policy_prompt(task: CodingTask) -> str:
    """The policy prompt of ``task``: a benchmark row's own prompt as the benchmark uses it (LiveBench's first
    turn, with its one answer instruction and, for a completion, its completion rule), else ours.

    Example:
        >>> t = CodingTask("t", "Print 1.", TestMethod.STDIO, (("", "1"),), prompt="Their prompt")
        >>> task_policy_prompt(t)
        'Their prompt'
    """
    if task.prompt:
        return task.prompt
    return policy_prompt(task.question, test_method=task.test_method, entry_point=task.entry_point)


def unit_test_prompt(question: str, *, test_method: TestMethod, entry_point: str | None = None) -> str:
    """The reward model's unit-test-writing prompt (spec §2.4, §5 "Coding UT generator")."""
    if test_method is TestMethod.STDIO:
        return UNIT_TEST_STDIO.format(question=question.strip())
    return UNIT_TEST_FUNCTION.format(question=question.strip(), entry_point=entry_point or "solution")
