"""Multi-turn episodes: the policy writes, a tool answers, the policy goes on.

An episode starts from a prompt. The policy samples a turn until its end-of-turn token; if the turn
holds a tool call (``<tool_call>...</tool_call>``, Qwen's format), the environment runs it and its
reply is appended as a user turn the policy did not write (:data:`ENVIRONMENT_TURN`, exactly what
the tool model's chat template renders for a tool message); then the policy writes the next turn.
The episode stops at a turn without a call (the answer), when a call would pass the turn limit
(``max_tool_calling_iterations``, TRL's name; the call is left unanswered), or when the length
budget runs out (``max_completion_length`` counts every token after the prompt, the environment's
included, as TRL does).

Every token keeps its author. ``action_mask`` is 1 on the tokens the policy sampled and 0 on the
environment's (TRL's ``tool_mask``): the trainer's loss mask is ``completion_mask * action_mask``,
so log-probs, ratios, KL, entropy and every aggregation count the policy's tokens only, and the
normalisers (``num_items_in_batch``, a sequence's length) are counts of policy tokens. The
environment's tokens stay in the sequence as context: the policy's later tokens are conditioned on
them in the training forward exactly as they were when sampled. ReTool (arXiv 2504.11536, section
3.2) and Search-R1 (arXiv 2503.09516, section 3.1) mask the retrieved or executed tokens for the
same reason: the policy did not choose them, so their log-probabilities carry no credit.

Per-turn rewards. An environment that keeps ``turn_rewards`` (a list it appends to as its tools
answer, as :class:`labkit.agents.GuessingEnv` does) has each answered turn's share recorded where
the turn ends: ``Episodes.turn_rewards`` holds, on the last token the policy wrote in a turn whose
reply entered the episode, what the environment appended while answering that turn's call (0 on
every other token; a reply cut by the length budget is not in the episode, and neither is its
reward). A turn-level advantage estimator (:mod:`labkit.advantages.turn_level`) reads them there,
as GAE reads an outcome on a completion's last token.

Batched: every turn samples all unfinished episodes at once with the KV-cached sampler
(:func:`labkit.sampling.generate_from_ids`, continuing from token ids, so nothing the policy
sampled is re-tokenized), and episodes of one group end at different turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch

from labkit.agents.tool_calls import ERROR_PREFIX, last_tool_call, run_tool_call
from labkit.plugins.settings import integer
from labkit.sampling import Decoder, Rollout, encode_prompts, generate_from_ids

#: The tokens appended after a turn that called a tool: the end of the assistant's turn is already
#: there (its end-of-turn token); then the reply as a user turn and the next assistant header.
ENVIRONMENT_TURN = ("\n<|im_start|>user\n<tool_response>\n{reply}\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n")


@dataclass
class Episodes(Rollout):
    """A :class:`labkit.sampling.Rollout` of multi-turn episodes (B rows, L tokens after the
    prompt), with who wrote what:

    ================ ========== ===============================================================
    field            shape      meaning
    ================ ========== ===============================================================
    action_mask      (B, L)     1 on tokens the policy sampled, 0 on the environment's and on
                                padding (``completion_mask`` is 1 on both authors' tokens)
    tool_calls       (B,) long  tool calls the environment answered
    tool_errors      (B,) long  of which answered with an error (malformed call, bad argument)
    turns            (B,) long  assistant turns written
    turn_limit       (B,) bool  the episode stopped at a call past ``max_tool_calling_iterations``
    turn_rewards     (B, L)     the environment's reward for each answered policy turn, on the
                                turn's last token (0 elsewhere); None unless every environment
                                keeps ``turn_rewards``
    environments     list       one environment per row, in the state the episode left it
    ================ ========== ===============================================================

    ``logprobs`` and ``entropies`` are 0 on the environment's tokens; ``texts`` hold the whole
    completion (turns, replies and the chat markers between them) for the reward functions.
    """

    action_mask: torch.Tensor | None = None
    tool_calls: torch.Tensor | None = None
    tool_errors: torch.Tensor | None = None
    turns: torch.Tensor | None = None
    turn_limit: torch.Tensor | None = None
    turn_rewards: torch.Tensor | None = None
    environments: list | None = None


def environment_turn_ids(tokenizer, reply: str) -> list[int]:
    """Token ids of the environment's turn for ``reply`` (:data:`ENVIRONMENT_TURN`)."""
    return tokenizer(ENVIRONMENT_TURN.format(reply=reply), add_special_tokens=False)["input_ids"]


def checked_environment_factory(factory, config=None):
    """``factory`` (TRL's ``environment_factory``) once it has built one environment that
    follows TRL's contract (:func:`environment_probe`), as TRL's ``GRPOTrainer`` probes its
    factory when it is built: a factory that returns None, or an object without a ``reset``
    method, is refused here rather than at the first step. ``config`` (a
    :class:`~labkit.config.TrainConfig`): its settings that cannot run with episodes are refused
    too. None passes through (no environment)."""
    if factory is None:
        return None
    if config is not None and config.rlplus_demonstrations:
        raise ValueError("rlplus_demonstrations=True with an environment_factory: RL-PLUS's "
                         "demonstrations are single-turn texts (the dataset's worked solution) "
                         "with no tool calls or environment turns to mask, so an episode's group "
                         "has no demonstration to hold; set rlplus_demonstrations=False or train "
                         "without the environment")
    environment_probe(factory)
    return factory


def environment_probe(factory):
    """One environment built by ``factory``, refused unless it has TRL's ``reset`` method (a
    function of its class, as TRL lists them)."""
    if not callable(factory):
        hint = (" (TRL's dict of named environments is not supported here: pass one factory)"
                if isinstance(factory, dict) else "")
        raise TypeError(f"environment_factory must be a callable that returns an environment "
                        f"(a class such as labkit.agents.CalculatorEnv), got "
                        f"{type(factory).__name__}{hint}")
    env = factory()
    if not callable(getattr(type(env), "reset", None)):
        raise TypeError(f"environment_factory() returned {type(env).__name__} {env!r:.60}, "
                        f"which has no reset method: an environment needs reset(**row) and its "
                        f"tools as public methods (TRL's contract; see labkit.agents.CalculatorEnv)")
    return env


def environments(factory, rows: dict, num_generations: int) -> list:
    """One fresh environment per episode, reset on its prompt's row (TRL's contract:
    ``factory()`` builds one, ``reset(**row)`` starts it)."""
    names = list(rows)
    envs = []
    for values in zip(*(rows[name] for name in names)):
        for _ in range(num_generations):
            env = factory()
            env.reset(**dict(zip(names, values)))
            envs.append(env)
    return envs


def run_episodes(model, tokenizer, prompts, environments, *, num_generations: int = 1,
                 max_completion_length: int = 256, max_tool_calling_iterations: int | None = None,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 greedy: bool = False, generator: torch.Generator | None = None,
                 decoder: Decoder | None = None) -> Episodes:
    """Run one episode per prompt and completion: ``len(prompts) * num_generations`` rows, the
    completions of one prompt consecutive (TRL's layout).

    ``environments`` holds one environment per row, already reset on its row's data (TRL's
    contract: public methods are the tools). ``max_tool_calling_iterations``: most tool calls an
    episode gets answered, an integer >= 1 (None: as many as the length budget allows).
    ``greedy``: every turn takes the arg-max token (ReMax's baseline episode). ``decoder``: the
    decode loop every turn runs (:class:`labkit.sampling.Decoder`).
    """
    rows = len(prompts) * num_generations
    if len(environments) != rows:
        raise ValueError(f"environments must hold one environment per episode: "
                         f"{len(prompts)} prompts x {num_generations} = {rows}, got "
                         f"{len(environments)}")
    if max_tool_calling_iterations is not None:  # TrainConfig's rule for the same field
        integer(SimpleNamespace(max_tool_calling_iterations=max_tool_calling_iterations),
                "max_tool_calling_iterations", low=1)
    device = next(model.parameters()).device
    prompt_ids, prompt_mask = encode_prompts(tokenizer, prompts, device)
    prompt_ids = prompt_ids.repeat_interleave(num_generations, dim=0)
    prompt_mask = prompt_mask.repeat_interleave(num_generations, dim=0)
    contexts = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask)]
    tokens, actions = [[] for _ in range(rows)], [[] for _ in range(rows)]
    logps, entropies = [[] for _ in range(rows)], [[] for _ in range(rows)]
    # each turn's reward on its last token, for environments that keep per-turn rewards
    keeps = all(isinstance(getattr(env, "turn_rewards", None), list) for env in environments)
    gains = [[] for _ in range(rows)]
    calls, errors, turns = [0] * rows, [0] * rows, [0] * rows
    truncated, limited, active = [False] * rows, [False] * rows, list(range(rows))
    limit = max_tool_calling_iterations
    while active:
        budget = max(max_completion_length - len(tokens[i]) for i in active)
        ids, mask = _left_padded([contexts[i] + tokens[i] for i in active], tokenizer, device)
        turn = generate_from_ids(model, tokenizer, ids, mask, max_completion_length=budget,
                                 temperature=temperature, top_p=top_p, top_k=top_k,
                                 greedy=greedy, generator=generator, decoder=decoder,
                                 # the first turn checks prompt + budget against the context;
                                 # later, each row's room is its own, below the longest's budget
                                 check_context_length=not any(tokens[i] for i in active))
        still = []
        for row, i in enumerate(active):
            room = max_completion_length - len(tokens[i])
            n = min(int(turn.lengths[row]), room)
            tokens[i] += turn.completion_ids[row, :n].tolist()
            actions[i] += [1] * n
            logps[i] += turn.logprobs[row, :n].tolist()
            entropies[i] += turn.entropies[row, :n].tolist()
            gains[i] += [0.0] * n
            turns[i] += 1
            if bool(turn.truncated[row]) or n < int(turn.lengths[row]):
                truncated[i] = True  # the budget ran out inside the turn
                continue
            body = last_tool_call(tokenizer.decode(turn.completion_ids[row, :n]))
            if body is None:
                continue  # a turn without a call: the answer, the episode is over
            if limit is not None and calls[i] >= limit:
                limited[i] = True
                continue
            kept = len(environments[i].turn_rewards) if keeps else 0
            reply = run_tool_call(environments[i], body)
            calls[i] += 1
            errors[i] += reply.startswith(ERROR_PREFIX)
            reply_ids = environment_turn_ids(tokenizer, reply)
            if len(tokens[i]) + len(reply_ids) >= max_completion_length:
                truncated[i] = True  # no room for the reply and an answer after it
                continue
            if keeps and n:  # the turn's reward, recorded once its reply is in the episode
                gains[i][-1] = float(sum(environments[i].turn_rewards[kept:]))
            tokens[i] += reply_ids
            actions[i] += [0] * len(reply_ids)
            logps[i] += [0.0] * len(reply_ids)
            entropies[i] += [0.0] * len(reply_ids)
            gains[i] += [0.0] * len(reply_ids)
            still.append(i)
        active = still
    return _episodes(tokenizer, prompt_ids, prompt_mask, tokens, actions, logps, entropies,
                     calls, errors, turns, truncated, limited, environments,
                     gains if keeps else None)


def _left_padded(sequences: list[list[int]], tokenizer, device):
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq):] = torch.tensor(seq, dtype=torch.long)
        mask[row, width - len(seq):] = 1
    return ids.to(device), mask.to(device)


def _episodes(tokenizer, prompt_ids, prompt_mask, tokens, actions, logps, entropies, calls,
              errors, turns, truncated, limited, environments, gains=None) -> Episodes:
    device, rows = prompt_ids.device, len(tokens)
    width = max(1, *(len(t) for t in tokens))

    def padded(values, fill, dtype):
        out = torch.full((rows, width), fill, dtype=dtype)
        for row, seq in enumerate(values):
            out[row, :len(seq)] = torch.tensor(seq, dtype=dtype)
        return out.to(device)

    lengths = torch.tensor([len(t) for t in tokens], device=device)
    completion_mask = (torch.arange(width, device=device)[None, :] < lengths[:, None]).long()
    completion_ids = padded(tokens, tokenizer.pad_token_id, torch.long)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    texts = [tokenizer.decode([t for t in seq if t not in (eos, pad)]) for seq in tokens]
    return Episodes(
        prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
        completion_mask=completion_mask, logprobs=padded(logps, 0.0, torch.float32),
        entropies=padded(entropies, 0.0, torch.float32), lengths=lengths,
        truncated=torch.tensor(truncated, device=device), texts=texts,
        action_mask=padded(actions, 0, torch.long),
        tool_calls=torch.tensor(calls, device=device),
        tool_errors=torch.tensor(errors, device=device),
        turns=torch.tensor(turns, device=device),
        turn_limit=torch.tensor(limited, device=device),
        turn_rewards=None if gains is None else padded(gains, 0.0, torch.float32),
        environments=list(environments))


def action_mask_of(tokenizer, completion_ids) -> list[int]:
    """The action mask of a finished episode read from its tokens alone: 1 where the policy
    wrote, 0 on each environment turn. An environment turn follows a turn that ended with a tool
    call (``</tool_call>`` then the end-of-turn token) and runs through the next assistant
    header (:data:`ENVIRONMENT_TURN`); padding is 0. This is how any trainer must mark tool
    tokens (TRL's ``tool_mask``), so it checks one against the other."""
    ids = [int(t) for t in completion_ids]
    header = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    close = tokenizer.convert_tokens_to_ids("</tool_call>")
    mask, i, called = [], 0, False
    while i < len(ids):
        token = ids[i]
        if token == tokenizer.pad_token_id:
            mask.append(0)
            i += 1
            continue
        mask.append(1)
        called = called or token == close
        i += 1
        if token == tokenizer.eos_token_id and called and i < len(ids):
            end = next((j + len(header) for j in range(i, len(ids) - len(header) + 1)
                        if ids[j:j + len(header)] == header), len(ids))
            mask += [0] * (end - i)
            i, called = end, False
    return mask


#: Who wrote a token of an episode: the policy, the tool (its reply's text) or the environment
#: (the chat markers and tags around the reply).
AUTHORS = ("policy", "tool", "environment")


def token_authors(tokenizer, completion_ids, action_mask) -> list[tuple[str, str]]:
    """``(token text, author)`` for each token of one episode's completion (padding dropped).

    The policy wrote the tokens whose action mask is 1; of the others, those between a
    ``<tool_response>`` line and its closing tag are the tool's reply, the rest the environment's
    framing (turn markers, tags, the next assistant header)."""
    ids, actions = list(map(int, completion_ids)), list(map(int, action_mask))
    open_id = tokenizer.convert_tokens_to_ids("<tool_response>")
    close_id = tokenizer.convert_tokens_to_ids("</tool_response>")
    out, inside = [], False
    for token, action in zip(ids, actions):
        if token == tokenizer.pad_token_id and not action:
            continue
        if action:
            author = "policy"
        elif token in (open_id, close_id):
            inside, author = token == open_id, "environment"
        else:
            author = "tool" if inside else "environment"
        out.append((tokenizer.convert_ids_to_tokens(token), author))
    # the newlines just inside the reply's tags frame it: the environment's
    for k, (text, author) in enumerate(out):
        if author == "tool" and text == "\n" and (
                out[k - 1][0] == "<tool_response>" or out[k + 1][0] == "</tool_response>"):
            out[k] = (text, "environment")
    return out


def policy_text(episodes: Episodes, tokenizer, row: int) -> str:
    """The text the policy itself wrote in episode ``row`` (its turns, without the replies)."""
    keep = (episodes.action_mask[row] == 1) & (episodes.completion_ids[row] != tokenizer.eos_token_id)
    return tokenizer.decode(episodes.completion_ids[row][keep])


__all__ = [
    "AUTHORS",
    "ENVIRONMENT_TURN",
    "Episodes",
    "action_mask_of",
    "checked_environment_factory",
    "environment_probe",
    "environment_turn_ids",
    "environments",
    "policy_text",
    "run_episodes",
    "token_authors",
]
