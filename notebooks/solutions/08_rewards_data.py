"""Reference solutions to the exercises of notebooks/08_rewards_data.ipynb.

Each function has the signature of the notebook's stub; the notebook checks it against labkit's
implementation with ``labkit.exercises.check_function``. Import with
``importlib.import_module("solutions.08_rewards_data")`` (the name starts with a digit).
"""

import math
import re
from collections import Counter


def ttrl_reward(prompts, completions, family):
    """TTRL's majority-vote reward: 1.0 when a completion's answer is its prompt's most common
    answer (ties: the first seen), 0.0 otherwise and for a completion without an answer."""
    answers = []
    for text in completions:
        found = re.findall(r"<answer>(.*?)</answer>", text, flags=re.DOTALL)
        answers.append(int(found[-1]) if found else None)
    votes = {}
    for prompt, answer in zip(prompts, answers):
        votes.setdefault(prompt, Counter())
        if answer is not None:
            votes[prompt][answer] += 1  # a Counter keeps first-seen order among equal counts
    label = {p: (c.most_common(1)[0][0] if c else None) for p, c in votes.items()}
    return [float(a is not None and a == label[p]) for p, a in zip(prompts, answers)]


def iwu_step(logits, scores, lr):
    """MT-GRPO's weight update: z = softmax(logits); logits - lr * z * (scores - z . scores)."""
    top = max(logits)
    exp = [math.exp(x - top) for x in logits]
    z = [e / sum(exp) for e in exp]
    mean = sum(zk * sk for zk, sk in zip(z, scores))
    return [x - lr * zk * (sk - mean) for x, zk, sk in zip(logits, z, scores)]


def pass_at_k(num_samples, num_correct, k):
    """Unbiased pass@k, the textbook form: 1 - C(n - c, k) / C(n, k), the chance that k answers
    drawn without replacement miss every right one (labkit computes it as a running product)."""
    return 1.0 - math.comb(num_samples - num_correct, k) / math.comb(num_samples, k)
