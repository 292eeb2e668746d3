"""Sampling: prompts in, completions with their sampling log-probs and entropies out.

Generation usually dominates an RL step, so this is a lean loop rather than ``model.generate``:
one prefill over the left-padded prompts, then one cached forward per new token, sampling from
``softmax(logits / temperature)`` with optional top-k / top-p, stopping each row at the end-of-turn
token and the whole batch as soon as every row has stopped (or at ``max_completion_length``).

=================  ===============================================================================
module             what
=================  ===============================================================================
``generation.py`` :func:`generate` (chat prompts), :func:`generate_from_ids` (token ids: the
                   episodes' later turns), :func:`continue_rollout` (partial rollouts): the
                   prefill, then one of the two decode loops
``rollout.py``     :class:`Rollout` (what a call returns, its shapes), prompt encoding, the
                   context check, RL-PLUS demonstrations put into a group
``draw.py``        one sampling step: top-k/top-p filtering, the token, its log-prob and entropy
``dynamic.py``     the CPU's decode loop: finished rows leave the batch
``fixed.py``       a GPU's decode loop: a static KV cache, finished rows kept in place, the step
                   captured and replayed as a CUDA graph
``plan.py``        which loop runs for a model, and why (:func:`plan_decoding`)
``decoder.py``     :class:`Decoder`: a caller's settings and the captured steps it keeps
=================  ===============================================================================

Which loop runs is an argument, never ambient state: a call takes ``decoder=``, a
:class:`Decoder` holding ``decode_path`` and ``cuda_graphs`` and the fixed loop's workspaces and
CUDA graphs, which live as long as the decoder (the trainer keeps one per run; a call without one
gets a fresh default, so nothing it captured outlives it).

Departures from TRL's generation path, on purpose:

* the recorded ``logprobs`` are the log-probabilities of the sampled tokens under the
  temperature-scaled **full** softmax, before top-k/top-p truncation. That is the quantity the
  training forward recomputes (``labkit.logprobs.token_logprobs`` at the same temperature), so an
  on-policy ratio is exactly 1 up to float error; vLLM's "processed" log-probs would instead
  include the truncation.
* the G samples of a prompt are consecutive rows (TRL's layout); the prompt is encoded once and
  its KV cache repeated G times (with G = 8 this cut the tiny model's sampling time by a third,
  the prefill of 128 padded rows having cost as much as the decoding).
"""

from labkit.sampling.decoder import Decoder
from labkit.sampling.draw import filter_logits, sample_next
from labkit.sampling.fixed import (
    CHECK_EVERY,
    GRAPH_LENGTH_BUCKET,
    GRAPHS_PER_MODEL,
    graph_cache_length,
)
from labkit.sampling.generation import continue_rollout, generate, generate_from_ids
from labkit.sampling.plan import DECODE_PATHS, DecodePlan, plan_decoding, static_cache_problem
from labkit.sampling.rollout import (
    ContextLengthError,
    Rollout,
    check_context,
    encode_prompts,
    prompt_text,
    with_demonstrations,
)

__all__ = ["CHECK_EVERY", "DECODE_PATHS", "GRAPHS_PER_MODEL", "GRAPH_LENGTH_BUCKET",
           "ContextLengthError", "DecodePlan", "Decoder", "Rollout", "check_context",
           "continue_rollout", "encode_prompts", "filter_logits", "generate", "generate_from_ids",
           "graph_cache_length", "plan_decoding", "prompt_text", "sample_next",
           "static_cache_problem", "with_demonstrations"]
