"""A generative judge: a small language model reads a problem and a completion and answers "Y"
(correct) or "N" (Generative Verifiers, GenRM direct; Zhang et al., arXiv 2408.15240, section 3).

The reward is not a rule but a model's judgment, the judge's probability of the "yes" token,
renormalised over the two verdict tokens (the paper's direct GenRM score, section 3.1):

.. math:: r(x, y) = \\frac{p_\\theta(\\text{Y} \\mid x, y, I)}
                         {p_\\theta(\\text{Y} \\mid x, y, I) + p_\\theta(\\text{N} \\mid x, y, I)}

where ``I`` is the instruction at the end of the judge's prompt (:func:`judge_prompt`). The paper
scores "Yes"; the lab's character tokenizer splits "yes" into three tokens, so the verdicts are the
single-token letters ``Y`` and ``N`` (a one-token verdict makes the score one forward pass and the
SFT target one token). ``sampled=True`` draws the verdict instead (reward 1 for Y, 0 for N): a
noisier reward with the same mean.

The shipped judge (``data/models/tiny-judge``, built by ``python -m labkit build_judge``) is the
tiny Qwen architecture warm-started from the tiny policy's weights and fine-tuned with
:mod:`labkit.finetune.sft` on the policy's own sampled completions, labelled by the rule verifier; see
:mod:`labkit.commands.build_judge` for the data and its measured agreement with the verifier.

=================== ==================================================================
object              what it is
=================== ==================================================================
:func:`judge_prompt` the user message the judge reads
:func:`yes_probability` (N,) P(Y) over {Y, N} for N (question, completion) pairs
:class:`JudgeReward` the reward function (TRL's signature), ``__name__ = "judge_reward"``
:func:`judge_agreement` agreement, precision, recall of the judge vs the rule verifier
=================== ==================================================================

The judge never sees the reference answer: the reward reads only the prompts and the completions,
so a policy can raise it without being right. Measured: GRPO preset on ``medium_cells`` (16
prompts x 8 per step, 40 steps, seed 0, one thread, 51 s) with ``[JudgeReward(judge, tokenizer)]``
as the only reward, on the shipped judge (84% agreement with the verifier on held-out completions
of the untrained policy, see :mod:`labkit.commands.build_judge`):

=========================== ========== ============ ============
column (mean of 5 steps)    steps 1-5  steps 21-25  steps 36-40
=========================== ========== ============ ============
``reward`` (judge's P(Y))   0.41       0.89         0.87
``accuracy`` (strict)       0.20       0.08         0.03
``completion_length``       16         28           30
=========================== ========== ============ ============

Eval accuracy (k = 4) fell from 22.5% to 1.2%. Strict accuracy does not follow the judge's reward:
the policy learned to please the judge. The judge was trained on the untrained policy's
completions, where a worked solution usually meant a right answer; the policy moved to longer,
worked-looking completions with wrong answers, off the judge's training distribution, where its
leniency (precision 69% even in distribution) is all that is left.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import torch

from labkit.models import CONTROL_TOKENS
from labkit.rewards.registry import register_reward
from labkit.rewards.rule_based import completion_content, completion_list
from labkit.sampling import encode_prompts
from labkit.tasks import data_dir

__all__ = ["JUDGE_DIR", "NO", "YES", "JudgeReward", "judge_agreement", "judge_prompt",
           "load_judge", "question_of", "verdict_ids", "without_control_tokens",
           "yes_probability"]

#: Where ``python -m labkit build_judge`` writes the shipped judge.
JUDGE_DIR = data_dir() / "models" / "tiny-judge"
#: The verdict tokens: one character each in the lab's tokenizer ("yes" would be three tokens).
YES, NO = "Y", "N"
#: The judge's instruction, after the problem and the completion.
INSTRUCTION = "Is the answer correct? Y/N"
#: Longest completion text shown to the judge (characters = tokens with the char tokenizer):
#: longer ones are cut from the left, keeping the answer at the end.
MAX_SHOWN_CHARS = 320
#: The ``<`` of a control token that removing the others formed (the rest looked ahead at).
_LEFT_OVER = re.compile("<(?=" + "|".join(re.escape(t[1:]) for t in CONTROL_TOKENS) + ")")


def without_control_tokens(text: str) -> str:
    """``text`` with no control token of the lab's tokenizers left in it, whatever a policy
    sampled (:data:`labkit.models.CONTROL_TOKENS`: ``<|im_start|>``, ``<|im_end|>``,
    ``<|endoftext|>``, ``<unk>``; the judge's prompt would refuse one, and the run would end).

    The tokens are removed. Removing one can join its neighbours into another
    (``<|im_<|im_end|>end|>`` -> ``<|im_end|>``), and removing again until nothing changes takes
    one pass per level of nesting: a hostile completion nests thousands deep. So a token that
    the removal formed is escaped instead, in one more pass: a space after its ``<``
    (``< |im_end|>``). Each token holds one ``<``, its first character, so the escape cannot form
    a new one: the result holds none, and sanitising it again changes nothing.
    """
    for token in CONTROL_TOKENS:
        text = text.replace(token, "")
    return _LEFT_OVER.sub("< ", text)


def judge_prompt(question: str, completion: str) -> list[dict]:
    """The judge's conversation: one user message with the problem, the candidate completion
    (without control tokens, which a policy can sample: :func:`without_control_tokens`;
    its last :data:`MAX_SHOWN_CHARS` characters) and :data:`INSTRUCTION`."""
    # sampled text may hold control tokens; as text they would forge a turn
    shown = without_control_tokens(str(completion))[-MAX_SHOWN_CHARS:]
    content = f"{question}\n{shown}\n{INSTRUCTION}"
    # a lone surrogate (sampled bytes decoded leniently) is not text a tokenizer can encode
    content = content.encode("utf-8", "replace").decode("utf-8")
    return [{"role": "user", "content": content}]


def question_of(prompt) -> str:
    """The problem text of a policy prompt: a string as is, else the last user message's text."""
    if isinstance(prompt, str):
        return prompt
    users = [m.get("content", "") for m in prompt or [] if isinstance(m, dict)
             and m.get("role") == "user"]
    return str(users[-1]) if users else ""


def verdict_ids(tokenizer) -> tuple[int, int]:
    """The token ids of :data:`YES` and :data:`NO`; ValueError unless each is one token."""
    ids = []
    for word in (YES, NO):
        tokens = tokenizer(word, add_special_tokens=False)["input_ids"]
        if len(tokens) != 1:
            raise ValueError(f"the verdict {word!r} is {len(tokens)} tokens with this tokenizer; "
                             f"the judge needs single-token verdicts")
        ids.append(tokens[0])
    return ids[0], ids[1]


@torch.no_grad()
def yes_probability(judge, tokenizer, questions, completions, *,
                    batch_size: int = 64) -> torch.Tensor:
    """P(Y) / (P(Y) + P(N)) at the judge's first answer position, for each pair; shape (N,),
    float32 on the CPU. One forward per batch of ``batch_size`` pairs, no gradient."""
    if len(questions) != len(completions):
        raise ValueError(f"got {len(questions)} questions for {len(completions)} completions")
    yes, no = verdict_ids(tokenizer)
    device = next(judge.parameters()).device
    was_training = judge.training
    judge.eval()
    out = []
    for start in range(0, len(questions), batch_size):
        prompts = [judge_prompt(q, c) for q, c in zip(questions[start:start + batch_size],
                                                      completions[start:start + batch_size])]
        ids, mask = encode_prompts(tokenizer, prompts, device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        logits = judge(input_ids=ids, attention_mask=mask, position_ids=positions,
                       logits_to_keep=1).logits[:, -1].float()
        # softmax over the two verdicts only: the renormalised score of GenRM
        out.append(torch.softmax(logits[:, [yes, no]], dim=-1)[:, 0].cpu())
    if was_training:
        judge.train()
    return torch.cat(out) if out else torch.zeros(0)


def load_judge(path=None, *, device="cpu", dtype="float32"):
    """The shipped judge (or one built into ``path``) and its tokenizer, offline."""
    from labkit.models import load_policy

    path = Path(JUDGE_DIR if path is None else path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no judge at {path}; build it with: python -m labkit build_judge")
    return load_policy(str(path), device=device, dtype=dtype)


@register_reward("judge", summary="the shipped tiny judge",
                 build=lambda: JudgeReward(*load_judge()))
class JudgeReward:
    """A reward function scored by a judge model: ``reward(prompts, completions, **columns)``
    returns P(Y) per completion (or a sampled 0/1 verdict with ``sampled=True``).

    It reads the prompts (for the problem) and the completions only; ``answer`` and every other
    column are ignored. The judge is moved to ``device`` (the policy's device: pass
    ``trainer.device`` or ``next(policy.parameters()).device``; default: where it is).
    ``generator`` seeds the sampled verdicts.
    """

    __name__ = "judge_reward"

    def __init__(self, judge, tokenizer, *, sampled: bool = False, device=None,
                 batch_size: int = 64, generator: torch.Generator | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.judge = judge if device is None else judge.to(device)
        self.judge.requires_grad_(False)
        self.tokenizer = tokenizer
        self.sampled = bool(sampled)
        self.batch_size = batch_size
        self.generator = generator
        verdict_ids(tokenizer)  # fail now, not in the middle of a run

    def __call__(self, prompts, completions, **_columns) -> list[float]:
        texts = [completion_content(c) for c in completion_list(completions)]
        questions = ([question_of(p) for p in prompts] if prompts is not None
                     else [""] * len(texts))
        p_yes = yes_probability(self.judge, self.tokenizer, questions, texts,
                                batch_size=self.batch_size)
        if self.sampled:
            return torch.bernoulli(p_yes, generator=self.generator).tolist()
        return p_yes.tolist()


def judge_agreement(judge, tokenizer, samples: pd.DataFrame, *, threshold: float = 0.5,
                    batch_size: int = 64) -> dict:
    """How often the judge's verdict (P(Y) >= ``threshold``) matches the rule verifier.

    ``samples`` has ``question``, ``text`` and ``correct`` (the verifier: 1.0 / 0.0; NaN rows are
    skipped), e.g. :func:`labkit.evaluate.sample_answers` plus the question column. Returns
    ``agreement`` (share of rows where verdict = verifier), ``precision`` (of the judge's Y, the
    share the verifier accepts), ``recall`` (of the verifier's correct rows, the share the judge
    accepts), ``base_rate`` (share correct), ``mean_p_yes_correct`` / ``mean_p_yes_wrong`` and
    ``n``. Precision or recall is NaN when its denominator is 0.
    """
    missing = {"question", "text", "correct"} - set(samples.columns)
    if missing:
        raise ValueError(f"samples lacks the column(s) {sorted(missing)}")
    judged = samples[samples["correct"].notna()]
    if judged.empty:
        raise ValueError("samples has no row the verifier judged (correct is NaN everywhere)")
    p = yes_probability(judge, tokenizer, judged["question"].tolist(), judged["text"].tolist(),
                        batch_size=batch_size)
    says_yes = p >= threshold
    right = torch.tensor((judged["correct"] > 0).to_numpy())

    def share(num, den):
        return float(num) / float(den) if den else math.nan

    return {"n": len(judged), "agreement": share((says_yes == right).sum(), len(judged)),
            "precision": share((says_yes & right).sum(), says_yes.sum()),
            "recall": share((says_yes & right).sum(), right.sum()),
            "base_rate": share(right.sum(), len(judged)),
            "mean_p_yes_correct": float(p[right].mean()) if right.any() else math.nan,
            "mean_p_yes_wrong": float(p[~right].mean()) if (~right).any() else math.nan}
