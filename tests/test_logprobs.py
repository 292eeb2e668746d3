"""labkit.logprobs: chunked log-probs and entropy equal the naive full log-softmax, in value and gradient."""

import pytest
import torch

from labkit.logprobs import logprobs_and_entropy, token_entropy, token_logprobs


def naive(logits, tokens, temperature=1.0):
    logp_all = torch.log_softmax(
        logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature, -1
    )
    logp = logp_all.gather(-1, tokens[..., None])[..., 0]
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, dtype=torch.float64, generator=g) * 3
    tokens = torch.randint(0, 11, (3, 5), generator=g)
    return logits, tokens


@pytest.mark.parametrize("chunk_size", [1, 4, 15, 1000, None])
@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_chunked_equals_naive_log_softmax_gather(data, chunk_size, temperature):
    logits, tokens = data
    logp, entropy = logprobs_and_entropy(logits, tokens, temperature, chunk_size=chunk_size)
    ref_logp, ref_entropy = naive(logits, tokens, temperature)
    torch.testing.assert_close(logp, ref_logp, rtol=0, atol=1e-12)
    torch.testing.assert_close(entropy, ref_entropy, rtol=0, atol=1e-12)
    assert (entropy >= 0).all()


def test_wrappers_match_the_combined_function(data):
    logits, tokens = data
    logp, entropy = logprobs_and_entropy(logits, tokens, 0.8, chunk_size=2)
    torch.testing.assert_close(token_logprobs(logits, tokens, 0.8, chunk_size=3), logp)
    torch.testing.assert_close(token_entropy(logits, 0.8, chunk_size=7), entropy)
    assert logprobs_and_entropy(logits, tokens, with_entropy=False)[1] is None


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_gradients_match_naive_autograd(data, temperature):
    logits, tokens = data
    g = torch.Generator().manual_seed(1)
    w_lp, w_h = (
        torch.randn(3, 5, dtype=torch.float64, generator=g),
        torch.randn(3, 5, dtype=torch.float64, generator=g),
    )

    x = logits.clone().requires_grad_()
    logp, entropy = logprobs_and_entropy(x, tokens, temperature, chunk_size=4)
    ((logp * w_lp).sum() + (entropy * w_h).sum()).backward()

    y = logits.clone().requires_grad_()
    ref_logp, ref_entropy = naive(y, tokens, temperature)
    ((ref_logp * w_lp).sum() + (ref_entropy * w_h).sum()).backward()
    torch.testing.assert_close(x.grad, y.grad, rtol=0, atol=1e-12)


def test_gradcheck_including_a_strided_input():
    g = torch.Generator().manual_seed(2)
    # logits[:, :-1] of a longer tensor cannot be flattened without a copy: rows are gathered.
    full = torch.randn(2, 5, 6, dtype=torch.float64, generator=g).requires_grad_()
    tokens = torch.randint(0, 6, (2, 4), generator=g)
    assert torch.autograd.gradcheck(
        lambda z: logprobs_and_entropy(z[:, :-1], tokens, 1.3, chunk_size=3), (full,)
    )
    assert torch.autograd.gradcheck(
        lambda z: token_logprobs(z, tokens, 0.9, chunk_size=5),
        (full[:, 1:].detach().requires_grad_(),),
    )


def test_logprob_only_backward_when_entropy_is_computed_but_unused(data):
    logits, tokens = data
    x = logits.clone().requires_grad_()
    logprobs_and_entropy(x, tokens)[0].sum().backward()
    y = logits.clone().requires_grad_()
    naive(y, tokens)[0].sum().backward()
    torch.testing.assert_close(x.grad, y.grad, rtol=0, atol=1e-12)


def test_bf16_logits_are_computed_in_float32():
    g = torch.Generator().manual_seed(3)
    logits = (torch.randn(2, 4, 50, generator=g) * 4).to(torch.bfloat16).requires_grad_()
    tokens = torch.randint(0, 50, (2, 4), generator=g)
    logp, entropy = logprobs_and_entropy(logits, tokens, 0.9, chunk_size=3)
    assert logp.dtype == entropy.dtype == torch.float32
    ref_logp, ref_entropy = naive(logits.detach().float(), tokens, 0.9)
    torch.testing.assert_close(logp, ref_logp, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, ref_entropy, rtol=0, atol=1e-5)
    logp.sum().backward()
    assert logits.grad.dtype == torch.bfloat16


def test_no_full_size_float32_tensor_is_kept_for_backward():
    """The memory claim: what autograd saves is the (bf16) logits themselves plus O(B*T) vectors."""
    logits = torch.randn(2, 8, 1000).to(torch.bfloat16).requires_grad_()
    tokens = torch.randint(0, 1000, (2, 8))
    saved = []

    def pack(t):
        saved.append((t.dtype, t.numel(), t.data_ptr()))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logprobs_and_entropy(logits, tokens, chunk_size=4)
    big = [s for s in saved if s[1] >= logits.numel()]
    assert big == [(torch.bfloat16, logits.numel(), logits.data_ptr())]

    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        naive(logits, tokens)
    assert any(
        dtype == torch.float32 and n >= logits.numel() for dtype, n, _ in saved
    )  # what we avoid


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_qwen_sized_vocabulary_on_gpu_needs_only_a_few_chunks_of_extra_memory():
    vocab, rows_per_chunk = 151_936, 32
    logits = torch.randn(2, 1024, vocab, device="cuda", dtype=torch.bfloat16).requires_grad_()
    tokens = torch.randint(0, vocab, (2, 1024), device="cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    logp, entropy = logprobs_and_entropy(logits, tokens, 0.7, chunk_size=rows_per_chunk)
    (logp.sum() + entropy.sum()).backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    grad_bytes = logits.numel() * 2  # the bf16 gradient itself is unavoidable
    chunk_bytes = rows_per_chunk * vocab * 4
    assert extra < grad_bytes + 10 * chunk_bytes  # a float32 copy of the logits would be 64 chunks
    ref_logp, ref_entropy = naive(logits.detach()[:, :8].float(), tokens[:, :8], 0.7)
    torch.testing.assert_close(logp[:, :8].detach(), ref_logp, rtol=0, atol=1e-4)
    torch.testing.assert_close(entropy[:, :8].detach(), ref_entropy, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"logits": torch.zeros(2, 3), "tokens": torch.zeros(2, dtype=torch.long)},
            "logits must have shape",
        ),
        ({"tokens": torch.zeros(2, 4, dtype=torch.long)}, "tokens must have shape"),
        ({"tokens": torch.zeros(2, 3)}, "integer"),
        ({"tokens": torch.full((2, 3), 5)}, r"\[0, V\)"),
        ({"tokens": torch.full((2, 3), -100)}, "padding"),
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"chunk_size": 0}, "chunk_size"),
    ],
)
def test_bad_inputs_raise_clear_errors(kwargs, match):
    args = {"logits": torch.zeros(2, 3, 5), "tokens": torch.zeros(2, 3, dtype=torch.long)} | kwargs
    with pytest.raises(ValueError, match=match):
        logprobs_and_entropy(**args)
