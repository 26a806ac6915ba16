"""A verifiers taskset written as its users write one (verifiers 0.4.0, ``import verifiers.v1 as vf``): sums to
answer in ``\\boxed{}``, scored by three weighted rewards (the format, a number at all, the value), so a reply
earns partial credit.

Taskset id ``rla-vf-sum`` (this package's module name with ``-`` for ``_``); ``num_tasks`` sums.
"""

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: str
    broken: bool = False  # the tests' failing grader


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=0.25)
    async def boxed(self, trace: vf.Trace) -> float:
        return 1.0 if "\\boxed{" in trace.last_reply else 0.0

    @vf.reward(weight=0.25)
    async def numeric(self, trace: vf.Trace) -> float:
        return 1.0 if any(c.isdigit() for c in trace.last_reply) else 0.0

    @vf.reward(weight=0.5)
    async def correct(self, trace: vf.Trace) -> float:
        if self.data.broken:
            raise RuntimeError("the grader is broken")
        return (
            1.0 if vf.extract_boxed_answer(trace.last_reply, strict=True).strip() == self.data.answer else 0.0
        )


def expected_reward(reply: str, answer: str) -> float:
    """The weighted sum of the rewards above, recomputed by hand from a reply (what the tests compare with)."""
    boxed = 1.0 if "\\boxed{" in reply else 0.0
    numeric = 1.0 if any(c.isdigit() for c in reply) else 0.0
    correct = 1.0 if vf.extract_boxed_answer(reply, strict=True).strip() == answer else 0.0
    return 0.25 * boxed + 0.25 * numeric + 0.5 * correct


class SumConfig(vf.TasksetConfig):
    num_tasks: int = 8
    broken_reward: bool = False  # every task's grader raises (what the tests play as a broken environment)


class SumTaskset(vf.Taskset[SumTask, SumConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            a, b = i % 5, (3 * i) % 4
            yield SumTask(
                SumData(
                    id=f"sum-{a}-{b}-{i}",
                    prompt=f"What is {a} + {b}? Answer with \\boxed{{}}.",
                    system_prompt="You add numbers.",
                    answer=str(a + b),
                    broken=self.config.broken_reward,
                ),
                self.config.task,
            )


__all__ = ["SumTaskset", "expected_reward"]
