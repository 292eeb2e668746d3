"""PPO on one screen: the policy, its critic and GAE, top to bottom, with transformers and torch.

Read :mod:`labkit.grpo_minimal` first: this file takes its sampling, scoring and log-probs by
import and replaces GRPO's group baseline with a learnt one, a critic. It is PPO (Schulman et al.
2017, arXiv 1707.06347: the clipped surrogate, section 3, eq. 7; the value loss, section 5,
eq. 9) with GAE (Schulman et al. 2016, arXiv 1506.02438, section 3, eq. 16; as PPO's section 5,
eqs. 11-12) over a completion's tokens, as the lab's ``preset("ppo")`` runs it.
``tests/test_ppo_minimal.py`` checks that :class:`labkit.trainer.Trainer` gets the same values,
advantages, returns and gradients (policy and critic) on the same batch and weights.

One step::

    sample G completions per prompt  ->  score by rule: reward r on each completion's last token
    ->  V_t = critic(text before token t), no grad   ->   delta_t = r_t + gamma V_t+1 - V_t,
        A_t = delta_t + gamma lam A_t+1, R_t = A_t + V_t  ->  A whitened over the batch's tokens
    ->  epochs x mini-batches of: -min(ratio A, clip(ratio, 1 - eps, 1 + eps) A)
                                  + vf_coef 0.5 max((V - R)^2, (V_clip - R)^2)  ->  step

Departures from the paper, the same as the lab's PPO preset and Trainer:

* an episode is a completion, an action a token; the reward comes only at the last token and
  V = 0 after it, also for a completion cut at ``max_new_tokens`` (TRL, verl); gamma = lam = 1
  (verl's defaults; the paper's Atari runs: 0.99, 0.95);
* the critic is its own network, a copy of the policy's trunk with a zero head
  (:class:`labkit.models.ValueModel`), with its own learning rate, 1e-3 (the paper shares one
  network on Atari); so vf_coef = 0.1 (TRL) only scales the critic's gradient;
* the value loss, 0.5 (V - R)^2, is clipped around the rollout's values, and the advantages are
  whitened over the batch's tokens (eps 1e-4 on the std), as OpenAI baselines' ppo2, TRL and
  verl do; neither is in the paper;
* the policy term of a mini-batch is its token sum over (the batch's tokens / mini_batches)
  (TRL's ``dapo`` normaliser), so one pass's mini-batches add up to the batch's token mean;
  the paper averages each mini-batch on its own. The value term is its mini-batch's token mean;
* no KL penalty (the preset's beta = 0, verl's default) and no entropy bonus (c2 = 0);
  G = 8 completions per prompt (the GRPO preset's data); 2 epochs x 2 mini-batches.

Departures from the Trainer, none of which changes a mini-batch's gradient: no learning-rate
warm-up (AdamW at constant rates); the mini-batch shuffle draws from torch's global generator;
none of the Trainer's savings (shared prompt forwards, length packing) nor its safety machinery.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from labkit.grpo_minimal import MinimalConfig, sample, score, token_logprobs
from labkit.models import ValueModel


@dataclass
class PPOConfig(MinimalConfig):
    gamma: float = 1.0  # discount per token
    lam: float = 1.0  # GAE's lambda
    vf_coef: float = 0.1  # weight of the value loss
    clip_range_value: float = 0.2  # how far a value may move from the rollout's
    value_learning_rate: float = 1e-3
    epochs: int = 2  # passes over each batch (the Trainer's num_iterations)
    mini_batches: int = 2  # optimizer steps per pass


def token_values(critic, prompt_ids, prompt_mask, completion_ids, completion_mask):
    """V(s_t), the critic's value of the text before completion token t, (N, L): read at the
    position whose logits predict token t, as :func:`token_logprobs` reads them."""
    attention_mask = torch.cat([prompt_mask, completion_mask], 1)
    values = critic(torch.cat([prompt_ids, completion_ids], 1), attention_mask,
                    (attention_mask.cumsum(-1) - 1).clamp(min=0))
    return values[:, prompt_ids.size(1) - 1:-1].float()


def gae(rewards, values, mask, gamma: float, lam: float):
    """GAE advantages and the critic's targets R = A + V, both (N, L) and 0 past each end; the
    reward (N,) is placed on each completion's last token, and V = 0 after it."""
    mask = mask.float()
    token_rewards = torch.zeros_like(values)
    token_rewards[torch.arange(len(rewards)), mask.sum(-1).long() - 1] = rewards.float()
    values = values * mask
    advantages, next_value, running = torch.zeros_like(values), 0.0, 0.0
    for t in reversed(range(values.size(1))):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]  # TD error
        running = delta + gamma * lam * running
        advantages[:, t], next_value = running, values[:, t]
    advantages = advantages * mask
    return advantages, advantages + values


def whiten(advantages, mask):
    """Advantages minus their mean over the batch's tokens, over their std (+ 1e-4)."""
    m = mask.bool()
    return torch.where(m, (advantages - advantages[m].mean()) / (advantages[m].std() + 1e-4), 0)


def ppo_loss(logp, old_logp, values, old_values, advantages, returns, mask, num_tokens, cfg):
    """One mini-batch's loss, all (n, L): the clipped surrogate (eq. 7) per token, summed and
    divided by ``num_tokens``, plus vf_coef x the clipped value loss's token mean. Negated."""
    m = mask.float()
    ratio = torch.exp(logp - old_logp)
    policy = -torch.minimum(ratio * advantages,
                            ratio.clamp(1 - cfg.epsilon, 1 + cfg.epsilon) * advantages)
    clipped = old_values + (values - old_values).clamp(-cfg.clip_range_value,
                                                       cfg.clip_range_value)
    value = 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return (policy * m).sum() / num_tokens + cfg.vf_coef * (value * m).sum() / m.sum()


def train(model, tokenizer, dataset, cfg: PPOConfig | None = None, *, critic=None,
          advantage_fn=gae, loss_fn=ppo_loss) -> list[dict]:
    """Run PPO for ``cfg.steps`` steps on ``dataset`` (as :func:`labkit.grpo_minimal.train`);
    ``critic`` defaults to a fresh :class:`~labkit.models.ValueModel` of ``model``. Returns one
    dict of metrics per step; ``advantage_fn`` and ``loss_fn`` replace :func:`gae` and
    :func:`ppo_loss`."""
    cfg = cfg or PPOConfig()
    torch.manual_seed(cfg.seed)
    critic = ValueModel(model) if critic is None else critic
    optimizer = torch.optim.AdamW(
        [{"params": list(model.parameters())},
         {"params": list(critic.parameters()), "lr": cfg.value_learning_rate}],
        lr=cfg.learning_rate, weight_decay=0.0)
    order = torch.randperm(len(dataset)).tolist()
    log = []
    for step in range(cfg.steps):
        start = (step * cfg.prompts_per_step) % len(dataset)
        rows = dataset[order[start:start + cfg.prompts_per_step]]
        # 1. sample G completions per prompt, 2. score them by rule
        model.eval(), critic.eval()
        *batch, texts = sample(model, tokenizer, rows["prompt"], cfg)
        mask = batch[3]
        rewards, accuracy = score(rows, texts, cfg.num_generations)
        # 3. the rollout's log-probs and values, 4. advantages and the critic's targets
        with torch.no_grad():
            old_logp = token_logprobs(model, *batch, cfg.temperature)
            old_values = token_values(critic, *batch)
        advantages, returns = advantage_fn(rewards, old_values, mask, cfg.gamma, cfg.lam)
        advantages = whiten(advantages, mask)
        # 5. epochs x mini-batches; after the first step the ratio leaves 1 and the clips act
        model.train(), critic.train()
        num_tokens, losses = mask.sum() / cfg.mini_batches, []
        for _ in range(cfg.epochs):
            for rows_ in torch.randperm(len(rewards)).tensor_split(cfg.mini_batches):
                mini = [x[rows_] for x in batch]
                loss = loss_fn(token_logprobs(model, *mini, cfg.temperature), old_logp[rows_],
                               token_values(critic, *mini), old_values[rows_],
                               advantages[rows_], returns[rows_], mask[rows_], num_tokens, cfg)
                optimizer.zero_grad()
                loss.backward()
                for group in optimizer.param_groups:  # policy and critic clipped apart
                    torch.nn.utils.clip_grad_norm_(group["params"], 1.0)
                optimizer.step()
                losses.append(loss.item())
        log.append({"step": step + 1, "reward": rewards.mean().item(),
                    "accuracy": accuracy.mean().item(),
                    "completion_length": mask.sum(-1).float().mean().item(),
                    "value": old_values[mask.bool()].mean().item(),
                    "loss": sum(losses) / len(losses)})
    return log


__all__ = ["PPOConfig", "gae", "ppo_loss", "token_values", "train", "whiten"]
