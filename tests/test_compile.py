"""compile_loss: the update's log-probs and policy loss through torch.compile
(labkit.training.compiled), proved on the CPU.

The compiled path gives the eager values and gradients up to float rounding, compiles one graph
per function for two completion lengths, keeps no float32 copy of the vocabulary for backward,
and a short run with it trains as the eager run does. Every fallback prints one line naming why
and gives the eager numbers bit for bit. Whether it is faster is a GPU question, not asked here.

Tolerance: float32 throughout (the trainer's dtype on a CPU). Inductor fuses the reductions
(logsumexp over the vocabulary, the sums over tokens and rows) and may reorder them; a reordered
sum of n float32 terms moves by about sqrt(n) x 1.2e-7 of its terms' size (n x 1.2e-7 at worst),
n of the order of 100 here (the tiny vocabulary), so rtol = atol = 1e-5 holds with margin
(measured: below 1e-6), while any real mistake (a mask, a sign, a normaliser) moves a value by
1e-2 or more.
"""

import functools

import pytest
import torch
from small_trainer import small_trainer
from torch._dynamo.utils import counters

from labkit.config import TrainConfig, preset
from labkit.logprobs import logprobs_and_entropy, whole_logprobs_and_entropy
from labkit.losses import policy_loss, policy_loss_settings
from labkit.trainer import TIMING_COLUMNS
from labkit.training.compiled import LossPath

SMALL = {"prompts_per_step": 4, "num_generations": 4, "max_completion_length": 16,
         "max_steps": 2, "progress": False}
# off-policy (two mini-batches), a KL to the reference and an entropy bonus: every input of the
# loss is a tensor and every term has a gradient
RUN = {"beta": 0.04, "entropy_coef": 0.01, "num_mini_batches": 2}
CLOSE = {"rtol": 1e-5, "atol": 1e-5}

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # torch's own import of torch.utils.mkldnn, the first time torch.compile loads Inductor
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]


def length_reward(prompts, completions, **columns):
    return [len(c[0]["content"]) / 16 for c in completions]


make_trainer = functools.partial(small_trainer, settings={**SMALL, **RUN},
                                 reward_funcs=(length_reward,))


@pytest.fixture(scope="module")
def base(random_tiny):
    return random_tiny


@pytest.fixture(scope="module")
def compiler():
    """Skip, saying why, where torch.compile cannot run at all (a Python or platform Dynamo does
    not support, no C++ compiler): a trivial function, so a failure here is the machine's."""
    try:
        torch.compile(lambda x: x + 1, dynamic=True)(torch.ones(2))
    except Exception as error:  # noqa: BLE001 (any failure means: no compiler on this machine)
        pytest.skip(f"torch.compile is unavailable here: {type(error).__name__}: {error}")


def random_update(length: int, vocab: int = 48, rows: int = 4, seed: int = 0):
    """Logits (rows, length, vocab) and the loss inputs of one micro-batch: ragged completions
    (one row empty), behaviour and reference log-probs near the current ones."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, length, vocab, generator=g) * 2
    tokens = torch.randint(0, vocab, (rows, length), generator=g)
    lengths = torch.tensor([length, length - 2, 3, 0])
    mask = (torch.arange(length) < lengths[:, None]).float()
    current = logprobs_and_entropy(logits, tokens, 0.8)[0]
    old, ref = (current + 0.3 * torch.randn(rows, length, generator=g) for _ in range(2))
    return logits, tokens, {"old_logp": old, "ref_logp": ref, "mask": mask,
                            "advantages": torch.randn(rows, generator=g)}


def update(path: LossPath | None, logits, tokens, inputs):
    """Log-probs, entropies, loss, metrics and the logits' gradient of one micro-batch, as the
    trainer computes them (through ``path``, or eagerly when None)."""
    logits = logits.clone().requires_grad_()
    logprobs = logprobs_and_entropy if path is None else path.logprobs
    loss_fn = policy_loss if path is None else path.policy_loss
    logp, entropy = logprobs(logits, tokens, 0.8, check_tokens=False)
    loss, metrics = loss_fn(
        logp, inputs["old_logp"], inputs["advantages"], inputs["mask"], ref_logp=inputs["ref_logp"],
        **policy_loss_settings(preset("grpo", **SMALL, **RUN)),
        num_items_in_batch=inputs["mask"].sum() / 2, num_sequences_in_batch=6, entropy=entropy)
    loss.backward()
    return {"logp": logp.detach(), "entropy": entropy.detach(), "loss": loss.detach(),
            **metrics, "grad": logits.grad}


def test_the_compiled_function_is_the_chunked_one_in_float64():
    """The function handed to torch.compile computes what the eager path computes (float64:
    equal to rounding), before any compiler touches it."""
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 5, 11, dtype=torch.float64, generator=g) * 3
    tokens = torch.randint(0, 11, (3, 5), generator=g)
    for got, want in zip(whole_logprobs_and_entropy(logits, tokens, 0.7),
                         logprobs_and_entropy(logits, tokens, 0.7)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_compiled_path_gives_eager_values_and_gradients_with_one_graph_per_function(compiler,
                                                                                     capsys):
    path = LossPath(compiled=True)
    graphs = []
    for length in (7, 12):
        logits, tokens, inputs = random_update(length)
        got, want = update(path, logits, tokens, inputs), update(None, logits, tokens, inputs)
        assert got.keys() == want.keys()
        for name in want:
            torch.testing.assert_close(got[name], want[name], **CLOSE, msg=name)
        assert got["grad"].abs().max() > 0 and got["loss"] != 0
        graphs.append(counters["stats"]["unique_graphs"])
    assert path.failure is None
    assert graphs[1] == graphs[0], "a second completion length compiled again"
    assert capsys.readouterr().out.splitlines() == [str(path)]
    assert str(path).startswith("loss path: log-probs and policy loss compiled")


def test_compiled_logprobs_keep_no_float32_copy_of_the_vocabulary(compiler):
    """What made the eager path chunked: backward keeps the logits and per-token statistics, not
    a (B, T, V) float32 softmax (what autograd saves, read on the CPU)."""
    path = LossPath(compiled=True)
    logits, tokens, _ = random_update(9)
    logits.requires_grad_()
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        path.logprobs(logits, tokens, 0.8)
    assert path.failure is None
    vocabulary_sized = [t for t in saved if t.numel() >= logits.numel()]
    assert len(vocabulary_sized) == 1 and vocabulary_sized[0].data_ptr() == logits.data_ptr()
    assert sum(t.numel() for t in saved) < 2 * logits.numel()


def without_timings(history):
    return history.drop(columns=[c for c in TIMING_COLUMNS if c in history])


def test_a_run_with_compile_loss_trains_as_the_eager_run(base, compiler, capsys):
    # Warm-up makes step 1's learning rate 0, so step 2 samples the same completions in both
    # runs and compares an update on equal inputs. The weights after it are not compared: Adam
    # moves a weight by about the learning rate whatever the size of its gradient, so a gradient
    # that is 0 up to rounding may move it either way; its loss, metrics and norm are compared.
    eager = make_trainer(base)
    eager_history = without_timings(eager.train().history)
    compiled = make_trainer(base, compile_loss=True)
    history = without_timings(compiled.train().history)
    assert list(history["learning_rate"]) == [0, 3e-4]
    assert (history["completion_length"] == eager_history["completion_length"]).all()
    for column in eager_history:
        torch.testing.assert_close(torch.tensor(history[column].to_numpy(dtype=float)),
                                   torch.tensor(eager_history[column].to_numpy(dtype=float)),
                                   **CLOSE, equal_nan=True, msg=column)
    assert compiled.loss_path.failure is None
    assert capsys.readouterr().out.splitlines() == [str(compiled.loss_path)]


def fallen_back_run(base, capsys):
    """The run with ``compile_loss=True`` (whose compile the test has made fail), checked bit for
    bit against the same run eager (history but timings, and weights); returns it and the lines
    it printed."""
    eager = make_trainer(base)
    eager.train()
    capsys.readouterr()
    compiled = make_trainer(base, compile_loss=True)
    compiled.train()
    assert without_timings(compiled.history).equals(without_timings(eager.history))
    assert all(torch.equal(a, b) for a, b in zip(compiled.model.parameters(),
                                                  eager.model.parameters()))
    return compiled, capsys.readouterr().out.splitlines()


def test_a_compile_failing_at_its_first_call_falls_back_once_in_one_line(base, monkeypatch,
                                                                         capsys):
    """A Dynamo or Inductor error at the first call (here torch.compile's function raises what
    Dynamo raises on a graph break, with the traced code's frames): one line naming the error and
    where, the eager numbers bit for bit, no retry."""
    class Unsupported(RuntimeError):
        pass

    calls = []

    def fails(*args, **kwargs):
        calls.append(1)
        raise Unsupported('Data-dependent branching\n\nfrom user code:\n  File "/a/labkit/'
                          'logprobs.py", line 9, in whole\n    z = ...\n  File "/a/b/c.py", '
                          'line 75, in inner\n    if bool(x.any()):\n')

    monkeypatch.setattr(torch, "compile", lambda fn, **options: fails)
    compiled, printed = fallen_back_run(base, capsys)
    assert len(calls) == 1, "a failed compile was tried again"
    line = ("loss path: eager; compile_loss fell back: torch.compile failed on the log-probs "
            "(Unsupported: Data-dependent branching at c.py:75 in inner)")
    assert printed == [line]
    assert str(compiled.loss_path) == line


def test_torch_compile_unavailable_falls_back_in_one_line(base, monkeypatch, capsys):
    def unsupported(fn, **options):
        raise RuntimeError("Python 3.15+ not yet supported for torch.compile")

    monkeypatch.setattr(torch, "compile", unsupported)
    _, printed = fallen_back_run(base, capsys)
    line = ("loss path: eager; compile_loss fell back: torch.compile is unavailable "
            "(RuntimeError: Python 3.15+ not yet supported for torch.compile)")
    assert printed == [line]


def test_a_real_inductor_failure_falls_back_even_with_dynamo_errors_suppressed(compiler,
                                                                               monkeypatch,
                                                                               capsys):
    """No working C++ compiler, for real (its caches off, or a cached kernel would need none),
    and TORCHDYNAMO_SUPPRESS_ERRORS's setting on, which would otherwise turn the failure into a
    silent eager frame: the loss path still says why, and its values are the eager ones."""
    import torch._functorch.config
    import torch._inductor.config

    monkeypatch.setattr(torch._dynamo.config, "suppress_errors", True)
    logits, tokens, _ = random_update(5)
    path = LossPath(compiled=True)
    with torch._inductor.config.patch({"cpp.cxx": ("/nonexistent/c++",), "fx_graph_cache": False}), \
            torch._functorch.config.patch(enable_autograd_cache=False):
        got = path.logprobs(logits, tokens, 0.8)
    for a, b in zip(got, logprobs_and_entropy(logits, tokens, 0.8)):
        assert torch.equal(a, b)
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("loss path: eager; compile_loss fell back: torch.compile failed on "
                           "the log-probs (InductorError: InvalidCxxCompiler: No working C++")


def test_compile_loss_is_off_by_default_and_takes_true_or_false():
    assert TrainConfig().compile_loss is False
    assert repr(LossPath()) == "LossPath(compiled=False, failure=None)"
    with pytest.raises(TypeError, match="compiled must be True or False, got 'False'"):
        LossPath("False")
    with pytest.raises(ValueError, match=r"compile_loss must be True or False, got 'yes' \(str\)"):
        TrainConfig(compile_loss="yes")
    config = TrainConfig()
    with pytest.raises(ValueError, match=r"compile_loss must be True or False, got 1 \(int\)"):
        config.compile_loss = 1
    assert config.compile_loss is False
