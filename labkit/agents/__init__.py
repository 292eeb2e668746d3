"""Tools and multi-turn environments for agentic RL (notebook 10).

The policy writes text until it emits a tool call or an answer; the environment's reply is
appended as tokens the policy did not sample, and the episode goes on. This package is the
environment side, pure Python, deterministic and seeded, treating the policy's text as hostile:

- :mod:`labkit.agents.tool_calls`: Qwen's ``<tool_call>`` / ``<tool_response>`` text format,
  finding the last call in a completion, parsing it safely and running it on an environment.
- :mod:`labkit.agents.calculator`: an exact calculator parsed by hand (no ``eval``), its
  environment and warm-start demonstrations on the task suite (ToRL, arXiv 2503.23383; ReTool,
  arXiv 2504.11536).
- :mod:`labkit.agents.guessing`: a game whose replies depend on every earlier turn, with
  per-turn and outcome rewards (RAGEN/StarPO, arXiv 2504.20073), a seeded dataset and a
  binary-search expert.
- :mod:`labkit.agents.retokenize`: why a trainer keeps the ids the policy sampled (token in,
  token out): a small BPE trained on the lab's text, and how often decode -> encode changes ids.

Both environments follow TRL's ``GRPOTrainer(environment_factory=...)`` contract: ``reset(**row)``,
public methods that are the tools, and an optional ``get_reward()``.
"""

from labkit.agents.calculator import CalculatorEnv, calculate, calculator_demonstration
from labkit.agents.guessing import GuessingEnv, expert_transcript, guessing_dataset
from labkit.agents.tool_calls import (
    ToolCall,
    ToolCallError,
    format_tool_call,
    format_tool_response,
    last_tool_call,
    parse_tool_call,
    run_tool_call,
)

#: Environments a data file (a reference-run spec) may name, by key, and what each is.
NAMED_ENVIRONMENTS = {
    "calculator": "labkit.agents.calculator.CalculatorEnv: an exact calculator tool",
    "no_tools": "labkit.agents.NoTools: no tool at all (a call gets an error reply)",
    "guessing": "labkit.agents.guessing.GuessingEnv: the guessing game (its own data)",
}


class NoTools:
    """An environment without tools, for the tool-free comparison: a call is answered with an
    error naming no tool, and the episode goes on."""

    def reset(self, **row) -> None:
        """Nothing to remember."""


def named_environment(name: str):
    """The environment factory (a class) a data file calls ``name`` (a key of
    :data:`NAMED_ENVIRONMENTS`); anything else is refused with the keys."""
    factories = {"calculator": CalculatorEnv, "no_tools": NoTools, "guessing": GuessingEnv}
    if not isinstance(name, str) or name not in factories:
        raise ValueError(f"environment {name!r} is not one of the lab's environments "
                         f"({', '.join(NAMED_ENVIRONMENTS)}); a data file names environments "
                         f"by these keys only")
    return factories[name]


__all__ = [
    "NAMED_ENVIRONMENTS",
    "CalculatorEnv",
    "GuessingEnv",
    "NoTools",
    "ToolCall",
    "ToolCallError",
    "calculate",
    "calculator_demonstration",
    "expert_transcript",
    "format_tool_call",
    "format_tool_response",
    "guessing_dataset",
    "last_tool_call",
    "named_environment",
    "parse_tool_call",
    "run_tool_call",
]
