"""labkit against TRL 1.16, numerically, on random off-policy inputs (skipped without TRL).

The oracles are TRL's own functions, not re-derivations:

* loss, its gradient and its metrics: ``trl.GRPOTrainer._compute_loss``, called on a real
  ``GRPOTrainer`` built (offline) around a tiny randomly initialised Qwen2 model and a locally built
  tokenizer. Only the model forward, ``_get_per_token_logps_and_entropies``, is replaced by a stub
  that returns chosen log-probs (a leaf tensor, so both losses are differentiated w.r.t. the same
  log-probs) and entropies. Everything after it (ratios, clipping, ``delta``, cispo/sapo, k3 KL and
  ``use_bias_correction_kl``, the aggregation of every ``loss_type``, gradient-accumulation
  scaling, the entropy bonus, clip/KL/entropy metrics) is TRL's code. Inputs are forced off-policy
  (``old_per_token_logps`` differs from the current log-probs), so clipping is exercised.
* advantages: ``GRPOTrainer._generate_and_score_completions`` on the same kind of trainer. It
  really samples two tokens per completion with the tiny model, then calls two reward functions
  that return prepared values (with ``None`` entries and an unscorable completion); TRL's returned
  ``advantages`` are compared for every ``scale_rewards`` and both ``multi_objective_aggregation``
  modes with ``reward_weights``.
* log-probs and entropy: ``trl.trainer.utils.selective_log_softmax`` and ``entropy_from_logits``.
* DAPO overlong penalty: ``trl.rewards.get_soft_overlong_punishment``.

Known, deliberate differences are not compared: TRL averages sequence-level clip flags over
sequences (labkit over tokens), and labkit returns exact zeros for constant groups (TRL: the
group mean's rounding error / 1e-4, 0 for 0/1 rewards and up to 2.4e-3 for rewards like 0.3).
"""

import os
import warnings

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
trl = pytest.importorskip("trl")

from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig, GRPOTrainer
from trl.rewards import get_soft_overlong_punishment
from trl.trainer.utils import entropy_from_logits, selective_log_softmax

from labkit.advantages import combine_rewards
from labkit.logprobs import logprobs_and_entropy
from labkit.losses import policy_loss
from labkit.rewards.shaping import overlong_penalty
from labkit.trl_bridge import TRL_METRICS

D = torch.float64
B, T, L_MAX = 4, 6, 8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A local tiny Qwen2 folder (so TRL can load a reference model from it) and a tokenizer."""
    vocab = {c: i for i, c in enumerate(["<pad>", "<eos>", *"abcdefghij"])}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>"
    )
    config = Qwen2Config(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        eos_token_id=1,
        pad_token_id=0,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny_qwen2")
    Qwen2ForCausalLM(config).save_pretrained(folder)
    return folder, hf_tokenizer


def make_trainer(tiny, tmp_path, reward_funcs=None, **overrides):
    folder, tokenizer = tiny
    args = {
        "output_dir": str(tmp_path),
        "use_cpu": True,
        "bf16": False,
        "report_to": [],
        "save_strategy": "no",
        "num_generations": 2,
        "per_device_train_batch_size": B,
        "max_completion_length": L_MAX,
    } | overrides
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GRPOTrainer(
            model=Qwen2ForCausalLM.from_pretrained(folder),
            reward_funcs=reward_funcs or [lambda prompts, completions, **kw: [0.0] * len(prompts)],
            args=GRPOConfig(**args),
            train_dataset=Dataset.from_dict({"prompt": ["ab", "cd"]}),
            processing_class=tokenizer,
        )


def random_batch(seed, batch=B):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 1, 4, 5, 3, 6, 2, 6][:batch])
    mask = (torch.arange(T)[None] < lengths[:, None]).long()
    logp = -torch.rand(batch, T, dtype=D, generator=g) * 3
    # off-policy: a per-row drift (so sequence ratios leave the clip band too) plus token noise
    drift = torch.tensor([0.5, -0.5, 0.15, -0.3, 0.4, -0.2, 0.0, 0.3][:batch], dtype=D)
    old = logp + drift[:, None] + torch.randn(batch, T, dtype=D, generator=g) * 0.3
    ref = logp + torch.randn(batch, T, dtype=D, generator=g) * 0.5
    adv = torch.randn(batch, dtype=D, generator=g)
    entropy = torch.rand(batch, T, dtype=D, generator=g) * 2
    return logp, old, ref, adv, mask, entropy


def trl_loss(trainer, logp, old, ref, adv, mask, entropy, num_items, grad_accum=1):
    """TRL's _compute_loss with the model forward replaced by the chosen log-probs."""
    leaf = logp.clone().requires_grad_()
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (leaf, entropy, None)
    trainer.current_gradient_accumulation_steps = grad_accum
    trainer.model.train()
    trainer._metrics["train"].clear()
    inputs = {
        "prompt_ids": torch.zeros(len(logp), 1, dtype=torch.long),
        "prompt_mask": torch.ones(len(logp), 1, dtype=torch.long),
        "completion_ids": torch.zeros(logp.shape, dtype=torch.long),
        "completion_mask": mask,
        "advantages": adv,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": torch.tensor(num_items),
    }
    loss = trainer._compute_loss(trainer.model, inputs)
    (grad,) = torch.autograd.grad(loss, leaf)
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return loss.detach(), grad, metrics


def labkit_loss(logp, old, ref, adv, mask, entropy, **kwargs):
    leaf = logp.clone().requires_grad_()
    loss, metrics = policy_loss(leaf, old, adv, mask, ref_logp=ref, entropy=entropy, **kwargs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad, metrics


# labkit's "sequence_sum" (sum over tokens, mean over sequences) is TRL's "luspo" aggregation.
TRL_NAME = {"sequence_sum": "luspo"}
CASES = [
    (loss_type, level, beta, bias_correction, delta)
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "vespo", "sequence_sum")
    for level in (("token",) if loss_type == "vespo" else ("token", "sequence"))
    for beta, bias_correction in ((0.0, False), (0.04, False), (0.04, True))
    for delta in ((None, 1.5) if loss_type not in ("cispo", "sapo", "vespo") else (None,))
]


@pytest.mark.parametrize("loss_type, level, beta, bias_correction, delta", CASES)
def test_policy_loss_matches_trl_compute_loss(
    tiny, tmp_path, loss_type, level, beta, bias_correction, delta
):
    epsilon_high = 5.0 if loss_type == "cispo" else 0.28
    trainer = make_trainer(
        tiny,
        tmp_path,
        loss_type=TRL_NAME.get(loss_type, loss_type),
        importance_sampling_level=level,
        beta=beta,
        use_bias_correction_kl=bias_correction,
        epsilon=0.2,
        epsilon_high=epsilon_high,
        delta=delta,
    )
    logp, old, ref, adv, mask, entropy = random_batch(seed=len(loss_type) + 10 * (level == "token"))
    expected = trl_loss(trainer, logp, old, ref, adv, mask, entropy, num_items=int(mask.sum()))
    got = labkit_loss(
        logp,
        old,
        ref,
        adv,
        mask,
        entropy,
        loss_type=loss_type,
        importance_sampling_level=level,
        epsilon=0.2,
        epsilon_high=epsilon_high,
        delta=delta,
        beta=beta,
        use_bias_correction_kl=bias_correction,
        max_completion_length=L_MAX,
        num_items_in_batch=int(mask.sum()),
    )
    torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-6, atol=1e-12)
    assert got[1].abs().sum() > 0
    trl_metrics, metrics = expected[2], got[2]
    torch.testing.assert_close(metrics["entropy"].item(), trl_metrics["entropy"])
    if beta:
        torch.testing.assert_close(metrics["kl_ref"].item(), trl_metrics["kl"], rtol=1e-6,
                                   atol=1e-12)
    if level == "token" and loss_type == "cispo":
        torch.testing.assert_close(
            metrics["clip_high"].item(), trl_metrics["cispo_clip_ratio"]
        )
    elif level == "token" and loss_type not in ("sapo", "vespo"):
        for trl_name, lab in TRL_METRICS.items():  # TRL's name -> the lab's
            if trl_name.startswith("clip_ratio/"):
                torch.testing.assert_close(metrics[lab].item(), trl_metrics[trl_name])


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo"])
def test_gradient_accumulation_scaling_matches_trl(tiny, tmp_path, loss_type):
    """Two micro-batches of one optimiser step: TRL divides by GA (or uses the global token count);
    labkit is told the size of the whole batch. Both give the same per-micro-batch loss."""
    epsilon_high = 5.0 if loss_type == "cispo" else None
    trainer = make_trainer(
        tiny,
        tmp_path,
        loss_type=loss_type,
        gradient_accumulation_steps=2,
        epsilon_high=epsilon_high,
    )
    logp, old, ref, adv, mask, entropy = random_batch(seed=7, batch=2 * B)
    total_tokens = int(mask.sum())
    for rows in (slice(0, B), slice(B, 2 * B)):
        micro = (logp[rows], old[rows], ref[rows], adv[rows], mask[rows], entropy[rows])
        expected = trl_loss(trainer, *micro, num_items=total_tokens, grad_accum=2)
        got = labkit_loss(
            *micro,
            loss_type=loss_type,
            epsilon_high=epsilon_high,
            max_completion_length=L_MAX,
            num_items_in_batch=total_tokens,
            num_sequences_in_batch=2 * B,
        )
        torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-12)
        torch.testing.assert_close(got[1], expected[1], rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_entropy_bonus_matches_trl(tiny, tmp_path, loss_type):
    trainer = make_trainer(tiny, tmp_path, loss_type=loss_type, entropy_coef=0.05)
    logp, old, ref, adv, mask, entropy = random_batch(seed=3)
    entropy = entropy.clone().requires_grad_()
    expected = trl_loss(trainer, logp, old, ref, adv, mask, entropy, num_items=int(mask.sum()))
    got = labkit_loss(logp, old, ref, adv, mask, entropy, loss_type=loss_type, entropy_coef=0.05)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-6, atol=1e-12)


def test_cispo_without_epsilon_high_is_refused_where_trl_caps_at_epsilon(tiny, tmp_path):
    trainer = make_trainer(tiny, tmp_path, loss_type="cispo")
    assert trainer.epsilon_high == 0.2  # TRL's silent fallback: every IS weight capped at 0.2
    logp, old, _, adv, mask, _ = random_batch(seed=5)
    with pytest.raises(ValueError, match="epsilon_high"):
        policy_loss(logp, old, adv, mask, loss_type="cispo")


# ---------------------------------------------------------------- advantages


def reward_table():
    """(N=12, K=2) rewards for 3 prompts x 4 completions; NaN = the function returned None."""
    nan = float("nan")
    return torch.tensor(
        [
            [1.0, 0.5],
            [0.0, nan],
            [1.0, 2.0],
            [nan, nan],  # unscorable: every function returned None
            [0.3, 0.3],
            [0.3, 0.3],
            [0.3, 0.3],
            [0.3, 0.3],  # a constant group
            [2.0, -1.0],
            [nan, 4.0],
            [-1.0, 0.0],
            [0.5, 1.5],
        ]
    )


@pytest.mark.parametrize("aggregation", ["sum_then_normalize", "normalize_then_sum"])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_match_trl_generate_and_score(tiny, tmp_path, aggregation, scale):
    table = reward_table()

    def reward_func(column):
        def func(prompts, completions, **kwargs):
            assert len(completions) == len(table)
            return [None if torch.isnan(v) else float(v) for v in table[:, column]]

        func.__name__ = f"reward_{column}"
        return func

    weights = [1.0, 0.5]
    trainer = make_trainer(
        tiny,
        tmp_path,
        reward_funcs=[reward_func(0), reward_func(1)],
        reward_weights=weights,
        num_generations=4,
        per_device_train_batch_size=12,
        max_completion_length=2,
        scale_rewards=scale,
        multi_objective_aggregation=aggregation,
    )
    trainer.model.train()
    inputs = [{"prompt": p} for p in ("ab", "cd", "ef") for _ in range(4)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = trainer._generate_and_score_completions(inputs)["advantages"]
    got = combine_rewards(table, torch.tensor(weights), 4, mode=aggregation, scale_rewards=scale)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert got[3] == 0  # unscorable
    # the constant group: exactly 0 before any batch-level step (TRL: the mean's rounding error
    # / 1e-4, 0 for 0/1 rewards and up to 2.4e-3 for rewards such as 0.3; docs/conventions.md)
    assert got[4:8].eq(got[4]).all() and (aggregation == "normalize_then_sum" or got[4] == 0)


# ---------------------------------------------------------------- log-probs, entropy, overlong


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_and_entropy_match_trl_utils(dtype, temperature):
    g = torch.Generator().manual_seed(4)
    logits = (torch.randn(3, 5, 40, generator=g) * 3).to(dtype)
    tokens = torch.randint(0, 40, (3, 5), generator=g)
    logp, entropy = logprobs_and_entropy(logits, tokens, temperature, chunk_size=4)
    trl_logp = selective_log_softmax(logits.float(), tokens, temperature=temperature)
    trl_entropy = entropy_from_logits(logits.float() / temperature)
    torch.testing.assert_close(logp, trl_logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, trl_entropy, rtol=0, atol=1e-5)


@pytest.mark.parametrize("max_len, cache", [(100, 20), (100, 0), (20480, 4096)])
def test_overlong_penalty_matches_trl_soft_overlong_punishment(max_len, cache):
    lengths = torch.tensor(
        [0, 1, max_len - cache - 1, max_len - cache, max_len - cache + 1, max_len - 1, max_len]
    )
    trl_values = get_soft_overlong_punishment(max_len, cache)(
        completion_ids=[[1] * int(n) for n in lengths]
    )
    torch.testing.assert_close(
        overlong_penalty(lengths, max_len, cache), torch.tensor(trl_values, dtype=torch.float32)
    )
