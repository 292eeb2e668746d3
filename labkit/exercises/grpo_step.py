"""A whole GRPO step built from a learner's two functions against the Trainer's gradient on one
real batch of the tiny model: :func:`check_grpo_gradient`."""

from __future__ import annotations

from collections.abc import Callable

import torch

from labkit.exercises.checker import LearnerError, _describe, _fmt, _worst

#: the gradient check's tolerance, per parameter tensor: |got - expected| <= GRAD_ATOL * max(1,
#: max |expected|) + GRAD_RTOL * |expected|. Not exact, because the Trainer adds the same float32
#: terms in another order (its forward shares each group's prompt, skips zero-advantage rows and
#: packs completions by length). On the check's batch the differences stay near 1e-7, a tenth
#: of the tolerance; a wrong piece (another std, aggregation or sign) moves the gradient by 1e-2
#: or more.
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6


def check_grpo_gradient(advantage_fn: Callable, loss_fn: Callable, *, model=None, tokenizer=None,
                        dataset=None, seed: int = 3) -> bool:
    """One GRPO step built from ``advantage_fn`` and ``loss_fn`` against the Trainer's.

    The Trainer of ``preset("grpo", prompts_per_step=4, num_generations=4,
    max_completion_length=48, seed=seed)`` samples and scores one batch and accumulates its
    gradient. On a copy of the same weights and the same batch, the learner's step:
    ``advantage_fn(rewards, num_generations)`` (as :func:`labkit.grpo_minimal.group_advantages`)
    and ``loss_fn(logp, logp.detach(), advantages, completion_mask, epsilon)`` (as
    :func:`labkit.grpo_minimal.clipped_token_loss`) on :func:`labkit.grpo_minimal.token_logprobs`,
    then ``backward``. The advantages are compared first, then every parameter's gradient, within
    :data:`GRAD_RTOL` and :data:`GRAD_ATOL` (float32 summation order, see there).

    One update per batch, so every ratio is 1 and the clip never acts here: check the clip on
    random off-policy inputs with :func:`check_function`.

    Args:
        model, tokenizer: the policy (default: the tiny model, float32 on the CPU).
        dataset: the training prompts (default: the first 32 of ``medium_cells("train")``).
        seed: the Trainer's seed, which picks the batch.

    Returns:
        True if advantages and gradients match; otherwise prints the first difference and returns
        False. Stubs that raise ``NotImplementedError`` return False with a reminder; any other
        exception of the learner's functions is re-raised as :class:`LearnerError`.
    """
    import copy

    from labkit import grpo_minimal
    from labkit.config import preset
    from labkit.models import load_policy
    from labkit.tasks import medium_cells
    from labkit.trainer import Trainer

    for label, fn in (("advantage_fn", advantage_fn), ("loss_fn", loss_fn)):
        if not callable(fn):
            raise TypeError(f"{label} must be a function, got {type(fn).__name__} {fn!r}")
    if model is None:
        model, tokenizer = load_policy("tiny", device="cpu", dtype="float32")
    dataset = medium_cells("train").select(range(32)) if dataset is None else dataset
    config = preset("grpo", prompts_per_step=4, num_generations=4, max_completion_length=48,
                    progress=False, seed=seed)
    trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                      train_dataset=dataset)
    batch, _ = trainer.sample_and_score()
    trainer.compute_advantages(batch)
    if not bool((batch.sequence_advantages != 0).any()):
        raise ValueError(f"seed {seed} samples a batch whose groups are all right or all wrong: "
                         f"no gradient to compare; pick another seed")
    trainer.model.train()
    trainer.accumulate_gradients(batch, trainer.rows_with_gradient(batch), batch.loss_mask.sum())
    expected = {n: p.grad for n, p in trainer.model.named_parameters() if p.grad is not None}

    mine = copy.deepcopy(model).train()
    mine.zero_grad(set_to_none=True)
    names = {"advantage_fn": getattr(advantage_fn, "__name__", "advantage_fn"),
             "loss_fn": getattr(loss_fn, "__name__", "loss_fn")}
    hints = {"advantage_fn": "gets rewards (N,) and num_generations, returns (N,)",
             "loss_fn": "gets logp, old_logp, advantages (N,), mask (N, L) and epsilon, returns "
                        "a scalar loss"}

    def call(which, fn, *args):
        try:
            return fn(*args)
        except NotImplementedError:
            print(f"Not implemented yet: replace the `raise NotImplementedError` in "
                  f"`{names[which]}` with your code, run that cell again, then this one.")
            return None
        except Exception as err:
            raise LearnerError(f"`{names[which]}` raised {type(err).__name__}: {err}\nHint: it "
                               f"{hints[which]}; the traceback above shows the line.") from err

    advantages = call("advantage_fn", advantage_fn, batch.rewards.clone(),
                      config.num_generations)
    if advantages is None:
        return False
    logp = grpo_minimal.token_logprobs(mine, batch.prompt_ids, batch.prompt_mask,
                                       batch.completion_ids, batch.completion_mask,
                                       config.temperature)
    loss = call("loss_fn", loss_fn, logp, logp.detach(), advantages, batch.completion_mask,
                config.epsilon)
    if loss is None:
        return False
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
        print(f"Not quite: `{names['loss_fn']}` must return a scalar tensor with a gradient, got "
              f"{_describe(loss)}{'' if getattr(loss, 'requires_grad', False) else ' without one'}"
              f": average to one number, and detach only old_logp.")
        return False
    loss.backward()
    what = (f"the same batch (the Trainer's {config.prompts_per_step} prompts x "
            f"{config.num_generations} completions, seed {seed})")
    got = torch.as_tensor(advantages)
    if got.shape != batch.sequence_advantages.shape:
        print(f"Not quite: `{names['advantage_fn']}` returned shape {tuple(got.shape)}, the "
              f"Trainer's advantages have {tuple(batch.sequence_advantages.shape)} ({what}).")
        return False
    worst = _worst(got.detach().to(batch.sequence_advantages.dtype), batch.sequence_advantages,
                   1e-6, 1e-5)
    if worst is not None:
        index = worst[1]
        print(f"Not quite: your advantages differ from the Trainer's on {what}. Completion "
              f"{index[0]}: got {_fmt(got[index])}, expected "
              f"{_fmt(batch.sequence_advantages[index])}; the batch's rewards are "
              f"{batch.rewards.tolist()}.")
        return False
    largest, used = 0.0, 0.0
    for name, param in mine.named_parameters():
        if name not in expected:
            continue
        want = expected[name]
        have = torch.zeros_like(want) if param.grad is None else param.grad
        bound = GRAD_ATOL * max(1.0, want.abs().max().item()) + GRAD_RTOL * want.abs()
        if not ((have - want).abs() <= bound).all():  # NaN counts as a difference
            error = (have - want).abs().max().item()
            print(f"Not quite: your advantages match the Trainer's, but the gradient of `{name}` "
                  f"differs (max abs error {error:.3g}, its largest entry "
                  f"{want.abs().max().item():.3g}) on {what}. Check the loss's sign, its "
                  f"aggregation (each completion's token mean, then the mean over completions) "
                  f"and its mask.")
            return False
        largest = max(largest, (have - want).abs().max().item())
        used = max(used, ((have - want).abs() / bound).max().item())
    print(f"Correct! One step of GRPO with these two functions gives the Trainer's gradient on "
          f"{what}: the advantages and all {len(expected)} parameter gradients agree, the largest difference "
          f"{largest:.1e} ({used:.0%} of the tolerance: float32 sums in another order).")
    return True
