"""Reference solutions to the exercises of notebooks/10_agents.ipynb.

``action_mask`` has the signature of the notebook's stub; the notebook checks it against
``labkit.agents.episodes.action_mask_of`` with ``labkit.exercises.check_function``.
``EXPERIMENT_PREDICTION`` and ``TURN_LIMIT_PREDICTION`` answer the experiment exercises (checked
with ``labkit.exercises.check_prediction``). Import with
``importlib.import_module("solutions.10_agents")`` (the name starts with a digit).
"""


def action_mask(tokenizer, completion_ids):
    """1 on the tokens the policy wrote, 0 on each environment turn and on padding.

    Walk the tokens once, remembering whether the current policy turn holds a ``</tool_call>``;
    at its end-of-turn token, mark everything up to and including the next assistant header as
    the environment's.
    """
    ids = [int(t) for t in completion_ids]
    header = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    close = tokenizer.convert_tokens_to_ids("</tool_call>")
    mask = [0] * len(ids)
    called, i = False, 0
    while i < len(ids):
        if ids[i] == tokenizer.pad_token_id:
            i += 1
            continue
        mask[i] = 1
        called = called or ids[i] == close
        if ids[i] == tokenizer.eos_token_id and called:
            # the environment's turn: skip to the end of the next assistant header
            j = i + 1
            while j < len(ids) and ids[j:j + len(header)] != header:
                j += 1
            i, called = min(j + len(header), len(ids)), False
            continue
        i += 1
    return mask


#: What halving max_completion_length does to the tool-call rate.
EXPERIMENT_PREDICTION = "down"
EXPERIMENT_WHY = (
    "The budget counts the reply: in section 1's episode the calling turn and the calculator's reply "
    "(section 3 counted them) already take more than 96 tokens, so an episode that calls the tool "
    "like that one is cut off before it answers and earns nothing, while a direct answer is far "
    "shorter and still earns its format reward. GRPO ranks calling below not calling, and the rate "
    "falls (the check above prints both runs' last 5 steps). Agent budgets must leave room for the "
    "environment's tokens.")


#: What cutting the guessing game's turn limit from 6 to 4 does to the warm start's solved share.
TURN_LIMIT_PREDICTION = "down"
TURN_LIMIT_WHY = (
    "A perfect binary search never needs a fifth guess, so a perfect player would lose nothing at a "
    "limit of 4. The warm start loses games there (the table above), so some of its games need a "
    "fifth or sixth guess: it wastes guesses (a malformed one, or one that a reply had already ruled "
    "out; look at a game in the episode widget), and the limit cuts off exactly those slower games. "
    "A turn limit is only harmless for a policy that plays near the optimum; RL on the game is what "
    "moves it there.")
