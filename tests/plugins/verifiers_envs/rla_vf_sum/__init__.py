"""A verifiers taskset written as its users write one (verifiers 0.4.0, ``import verifiers.v1 as vf``): sums to
answer in ``\\boxed{}``, scored by two weighted rewards (the format, the value), so a reply earns partial credit.

Taskset id ``rla-vf-sum`` (this package's module name with ``-`` for ``_``); ``num_tasks`` sums.
"""

import verifiers.v1 as vf


class SumData(vf.TaskData):
    answer: str


class SumTask(vf.Task[SumData]):
    @vf.reward(weight=0.25)
    async def boxed(self, trace: vf.Trace) -> float:
        return 1.0 if "\\boxed{" in trace.last_reply else 0.0

    @vf.reward(weight=0.75)
    async def correct(self, trace: vf.Trace) -> float:
        return (
            1.0 if vf.extract_boxed_answer(trace.last_reply, strict=True).strip() == self.data.answer else 0.0
        )


class SumConfig(vf.TasksetConfig):
    num_tasks: int = 8


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
                ),
                self.config.task,
            )


__all__ = ["SumTaskset"]
