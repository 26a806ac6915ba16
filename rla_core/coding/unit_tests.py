"""Parse reward-model outputs into generated unit tests and extract policy code (spec §1.1, §2.4, §5).

Example:
    >>> df = unit_test_rows(iteration=0, task_id="t", prompts=["p"],
    ...     responses=["**Test Input:**\\n```\\n2\\n```\\n**Test Output:**\\n```\\n4\\n```"])
    >>> df.select("test_input", "test_output", "valid").row(0)
    ('2', '4', True)
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from rla_core.algo.parsing import Parsed, extract_code_block, parse_unit_test
from rla_core.schemas import validate


def extract_program(response: str) -> Parsed[str]:
    """The policy's program: the last python block of its response (spec §5 "Coding policy")."""
    return extract_code_block(response, language="python")


def unit_test_rows(
    *, iteration: int, task_id: str, prompts: Sequence[str], responses: Sequence[str]
) -> pl.DataFrame:
    """Artifact 'unit_tests' rows for one task's K generated tests.

    Writes iteration, task_id, test_idx (0..K-1), prompt, response, test_input, test_output, valid,
    invalid_reason. An unparsable response or an empty input/output block is ``valid=False`` with the
    reason and empty test strings; it fails every program (spec §1.1 step 3, §2.4 quirk).
    """
    if len(prompts) != len(responses):
        raise ValueError(f"task '{task_id}': {len(prompts)} prompts but {len(responses)} responses")
    rows = []
    for k, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        parsed = parse_unit_test(response)
        test_in, test_out = parsed.value if parsed.value is not None else ("", "")
        rows.append(
            {
                "iteration": iteration,
                "task_id": task_id,
                "test_idx": k,
                "prompt": prompt,
                "response": response,
                "test_input": test_in,
                "test_output": test_out,
                "valid": parsed.valid,
                "invalid_reason": parsed.reason,
            }
        )
    schema = {
        "iteration": pl.Int64,
        "task_id": pl.String,
        "test_idx": pl.Int64,
        "prompt": pl.String,
        "response": pl.String,
        "test_input": pl.String,
        "test_output": pl.String,
        "valid": pl.Boolean,
        "invalid_reason": pl.String,
    }
    return validate("unit_tests", pl.DataFrame(rows, schema=schema), where=f"unit tests of {task_id}")
