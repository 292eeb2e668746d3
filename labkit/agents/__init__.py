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

__all__ = ["CalculatorEnv", "GuessingEnv", "ToolCall", "ToolCallError", "calculate",
           "calculator_demonstration", "expert_transcript", "format_tool_call",
           "format_tool_response", "guessing_dataset", "last_tool_call", "parse_tool_call",
           "run_tool_call"]
