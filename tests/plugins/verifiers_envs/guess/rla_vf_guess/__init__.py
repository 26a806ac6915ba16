"""A multi-turn verifiers environment written as its users write one (verifiers 0.4.0): the agent guesses a
number between 1 and 9, the environment answers each guess (``higher``, ``lower``) as the user's next turn
through an interaction, until the number is found or the guesses run out. The task's reward reads the
conversation: 1 when an assistant turn named the number.

Taskset id ``rla-vf-guess``; the env (``GuessEnv``, role ``player``) is exported beside the taskset, so
verifiers pairs them.
"""

import re

import verifiers.v1 as vf


class GuessData(vf.TaskData):
    secret: int


class GuessTask(vf.Task[GuessData]):
    @vf.reward(weight=1.0)
    async def found(self, trace: vf.Trace) -> float:
        said = [_number(m.content or "") for m in trace.assistant_messages]
        return 1.0 if self.data.secret in said else 0.0


def _number(text: str) -> int | None:
    found = re.findall(r"\d", text if isinstance(text, str) else "")
    return int(found[-1]) if found else None


class GuessConfig(vf.TasksetConfig):
    num_tasks: int = 6


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self):
        for i in range(self.config.num_tasks):
            yield GuessTask(
                GuessData(
                    name=f"guess-{i}",
                    prompt="I picked a number between 1 and 9. Guess it: answer with one digit.",
                    system_prompt="You play a guessing game.",
                    secret=1 + (7 * i) % 9,
                ),
                self.config.task,
            )


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(max_turns=6)
    max_guesses: int = 4


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        secret = task.data.secret
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            for _ in range(self.config.max_guesses - 1):
                if segment.terminated:
                    break
                guess = _number(segment.last_reply)
                if guess == secret:
                    break
                hint = "Give one digit." if guess is None else ("higher" if guess < secret else "lower")
                segment = await interaction.turn(hint)


__all__ = ["GuessEnv", "GuessTaskset"]
