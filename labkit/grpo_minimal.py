"""GRPO on one screen: the whole algorithm, top to bottom, with transformers and torch only.

Read this file first. It is GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300, section 4.1)
with the lab's rewards and nothing else: no speed tricks, no safety machinery, no other methods.
:class:`labkit.trainer.Trainer` runs the same algorithm with savings that leave the gradient
unchanged (``tests/test_grpo_minimal.py`` checks that both give the same gradient on the same
batch) and with every other method of the lab.

One step::

    sample G completions per prompt  ->  score them by rule  ->  A = (r - mean_g) / (std_g + eps)
    ->  loss = -mean_i mean_t min(ratio * A_i, clip(ratio, 1 - eps, 1 + eps) * A_i)  ->  step

Departures from the paper, the same as the lab's GRPO preset: no KL term (beta = 0, TRL's
default), one update per batch (so the ratio is exactly 1 and the clip never acts; the gradient
is REINFORCE's with the group baseline), and AdamW at the tiny model's learning rate.

``train(..., advantage_fn=, loss_fn=)`` swaps in your own versions of the two GRPO-specific
pieces, :func:`group_advantages` and :func:`clipped_token_loss` (notebook 02, exercise 4).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.rewards import accuracy_reward, format_reward


@dataclass
class MinimalConfig:
    prompts_per_step: int = 16  # prompts sampled per step
    num_generations: int = 8  # G, completions per prompt: the group
    max_new_tokens: int = 128  # longest completion
    temperature: float = 1.0  # sampling temperature, also used for the training log-probs
    epsilon: float = 0.2  # PPO clip half-width
    learning_rate: float = 3e-4
    steps: int = 20
    seed: int = 0


def sample(model, tokenizer, prompts, cfg: MinimalConfig):
    """G completions of each chat prompt. Returns prompt ids/mask (N, P), completion ids/mask
    (N, L) and the decoded texts; N = len(prompts) * G, a prompt's G completions consecutive."""
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
             for p in prompts]
    enc = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left",
                    add_special_tokens=False).to(model.device)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=cfg.temperature, top_k=0,
                             max_new_tokens=cfg.max_new_tokens,
                             num_return_sequences=cfg.num_generations,
                             pad_token_id=tokenizer.pad_token_id)
    completion_ids = out[:, enc["input_ids"].size(1):]
    # A completion ends at its first end-of-turn token, which it keeps (it was sampled too).
    is_eos = completion_ids == tokenizer.eos_token_id
    after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0
    completion_mask = (~after_eos).long()
    prompt_ids = enc["input_ids"].repeat_interleave(cfg.num_generations, 0)
    prompt_mask = enc["attention_mask"].repeat_interleave(cfg.num_generations, 0)
    decoded = tokenizer.batch_decode(completion_ids.masked_fill(after_eos | is_eos,
                                                                tokenizer.pad_token_id),
                                     skip_special_tokens=True)
    return prompt_ids, prompt_mask, completion_ids, completion_mask, decoded


def score(rows: dict, texts: list[str], num_generations: int):
    """Rule-checked reward of each completion, accuracy + format (TRL's reward signature).
    Returns the rewards and, for the log, the accuracy part (1 = right answer), both (N,)."""
    columns = {k: [v for v in values for _ in range(num_generations)]
               for k, values in rows.items()}
    prompts = columns.pop("prompt")
    accuracy, form = (torch.tensor([r or 0.0 for r in fn(prompts, texts, **columns)])
                      for fn in (accuracy_reward, format_reward))
    return accuracy + form, accuracy


def group_advantages(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """GRPO's advantage: each reward against its own group's mean and std (eq. in section 4.1.2;
    eps = 1e-4 as in TRL; Bessel's n - 1 as torch.std does)."""
    groups = rewards.view(-1, num_generations)
    advantages = (groups - groups.mean(-1, keepdim=True)) / (groups.std(-1, keepdim=True) + 1e-4)
    return advantages.view(-1)


def token_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                   temperature: float) -> torch.Tensor:
    """log pi(token) of every completion token under ``model``, (N, L): one forward of
    [prompt | completion]; position t's logits predict token t + 1."""
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    attention_mask = torch.cat([prompt_mask, completion_mask], 1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # prompts are left-padded
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=position_ids).logits
    logits = logits[:, prompt_ids.size(1) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, completion_ids[..., None]).squeeze(-1)


def clipped_token_loss(logp, old_logp, advantages, mask, epsilon: float) -> torch.Tensor:
    """PPO's clipped surrogate per token, averaged over each completion's tokens, then over
    completions (GRPO's eq. 3). Negated: optimizers minimise."""
    ratio = torch.exp(logp - old_logp)
    a = advantages[:, None]
    per_token = -torch.minimum(ratio * a, ratio.clamp(1 - epsilon, 1 + epsilon) * a)
    mask = mask.float()
    return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()


def train(model, tokenizer, dataset, cfg: MinimalConfig | None = None, *,
          advantage_fn=group_advantages, loss_fn=clipped_token_loss) -> list[dict]:
    """Run GRPO for ``cfg.steps`` steps on ``dataset`` (a ``datasets.Dataset`` with a chat
    ``prompt`` column and the columns the rewards read); returns one dict of metrics per step.
    ``advantage_fn`` and ``loss_fn`` take the arguments of the two functions they replace."""
    cfg = cfg or MinimalConfig()
    torch.manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate)
    order = torch.randperm(len(dataset)).tolist()
    log = []
    for step in range(cfg.steps):
        start = (step * cfg.prompts_per_step) % len(dataset)
        rows = dataset[order[start:start + cfg.prompts_per_step]]
        # 1. sample G completions per prompt with the current policy
        model.eval()
        prompt_ids, prompt_mask, completion_ids, completion_mask, texts = sample(
            model, tokenizer, rows["prompt"], cfg)
        # 2. score them by rule, 3. compare each with its group
        rewards, accuracy = score(rows, texts, cfg.num_generations)
        advantages = advantage_fn(rewards, cfg.num_generations)
        # 4. one gradient step on the clipped surrogate; the policy that sampled is the current
        #    one, so old_logp = logp.detach(): ratio 1 in value, grad log pi in gradient
        model.train()
        logp = token_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                              cfg.temperature)
        loss = loss_fn(logp, logp.detach(), advantages, completion_mask, cfg.epsilon)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        log.append({"step": step + 1, "reward": rewards.mean().item(),
                    "accuracy": accuracy.mean().item(),
                    "completion_length": completion_mask.sum(-1).float().mean().item(),
                    "loss": loss.item()})
    return log


__all__ = ["MinimalConfig", "clipped_token_loss", "group_advantages", "sample", "score",
           "token_logprobs", "train"]
