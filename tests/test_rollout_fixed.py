"""The fixed-shape decode loop (labkit.sampling.fixed) against the dynamic one
(labkit.sampling.dynamic).

On the CPU in float32 and under the same seed the fixed loop gives the dynamic loop's tokens,
lengths and texts exactly, draws exactly the same random numbers (the generator ends in the
same state), and gives its log-probs and entropies within ATOL: a static cache attends over
masked positions and a batch that keeps its finished rows runs matrix products of another
height, which sum in another order (measured: at most 1.1e-5 on these cases).
"""

import copy
import gc
import warnings
import weakref
from contextlib import nullcontext

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from labkit.agents.calculator import CalculatorEnv
from labkit.agents.episodes import environments, run_episodes
from labkit.config import TrainConfig, preset
from labkit.models import load_policy
from labkit.sampling import DecodePlan, Decoder, generate, generate_from_ids, plan_decoding
from labkit.sampling import fixed as fixed_loop
from labkit.scale.bench_memory import alternating_reward
from labkit.tasks import load_split
from labkit.trainer import Trainer

pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = 3e-5
FIELDS = ("completion_ids", "completion_mask", "lengths", "truncated", "texts")

CASES = {
    "sampled": {},
    "greedy": {"greedy": True},
    "top_k_hot": {"top_k": 5, "temperature": 1.3},
    "top_p_cold": {"top_p": 0.8, "temperature": 0.6},
    "truncated": {"max_completion_length": 7},
    "one_per_prompt": {"num_generations": 1},
}


@pytest.fixture(scope="module")
def prompts():
    return load_split("train").select(range(8))["prompt"]


def both_loops(call, seed: int = 3, fixed: Decoder | None = None):
    """``call(generator=..., decoder=...)`` on each loop from the same seed: the two results and
    the two generators' final states. ``fixed``: the fixed loop's decoder, kept by the caller
    across calls (a shape is captured at its second use); default a fresh one."""
    results, states = [], []
    for decoder in (Decoder("dynamic"), fixed or Decoder("fixed")):
        generator = torch.Generator().manual_seed(seed)
        results.append(call(generator=generator, decoder=decoder))
        states.append(generator.get_state())
    return results, states


def assert_same_rollout(a, b):
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y, name
    torch.testing.assert_close(b.logprobs, a.logprobs, rtol=0, atol=ATOL)
    torch.testing.assert_close(b.entropies, a.entropies, rtol=0, atol=ATOL)


@pytest.mark.parametrize("case", CASES)
def test_the_fixed_loop_samples_what_the_dynamic_loop_samples(shipped_tiny, prompts, case):
    model, tokenizer = shipped_tiny
    settings = {"num_generations": 4, "max_completion_length": 48, **CASES[case]}
    (dynamic, fixed), (state_a, state_b) = both_loops(
        lambda **kw: generate(model, tokenizer, prompts, **settings, **kw))
    assert_same_rollout(dynamic, fixed)
    assert torch.equal(state_a, state_b)  # the same random numbers, no more, no fewer
    assert dynamic.lengths.unique().numel() > 1  # rows finished at different steps
    if case == "truncated":
        assert 0 < int(dynamic.truncated.sum()) < len(dynamic.truncated)


def test_a_continuation_from_token_ids_samples_the_same(shipped_tiny, prompts):
    """An episode's next turn: the prompt, the first answer and a reply, re-padded on the left."""
    model, tokenizer = shipped_tiny
    first = generate(model, tokenizer, prompts[:4], num_generations=2,
                     max_completion_length=24, generator=torch.Generator().manual_seed(0))
    reply = tokenizer("\n<|im_start|>user\nagain<|im_end|>\n<|im_start|>assistant\n",
                      add_special_tokens=False)["input_ids"]
    sequences = [ids[mask.bool()].tolist() + c[:n].tolist() + reply
                 for ids, mask, c, n in zip(first.prompt_ids, first.prompt_mask,
                                            first.completion_ids, first.lengths)]
    width = max(map(len, sequences))
    ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(s)) + s for s in sequences])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences])
    (dynamic, fixed), (state_a, state_b) = both_loops(
        lambda **kw: generate_from_ids(model, tokenizer, ids, mask, num_generations=2,
                                       max_completion_length=32, top_k=20, **kw))
    assert_same_rollout(dynamic, fixed)
    assert torch.equal(state_a, state_b)


def test_episodes_sample_the_same_on_both_loops():
    """Notebook 10's episodes: several turns, tool replies between them, rows ending apart."""
    model, tokenizer = load_policy("tiny-tools", device="cpu", dtype="float32")
    rows = load_split("eval").select(range(3))
    runs = []
    for path in ("dynamic", "fixed"):
        runs.append(run_episodes(model, tokenizer, rows["prompt"],
                                 environments(CalculatorEnv, rows[:], 4), num_generations=4,
                                 max_completion_length=128, max_tool_calling_iterations=2,
                                 generator=torch.Generator().manual_seed(0),
                                 decoder=Decoder(path)))
    dynamic, fixed = runs
    assert_same_rollout(dynamic, fixed)
    assert torch.equal(dynamic.action_mask, fixed.action_mask)
    assert int(dynamic.tool_calls.sum()) > 0 and dynamic.turns.unique().numel() > 1


def test_drawing_for_every_row_would_change_the_random_stream(shipped_tiny, prompts,
                                                             monkeypatch):
    """Why the fixed loop draws for the live rows only on the CPU: a draw for every row,
    finished ones included (what a GPU does to avoid a host read), takes more numbers from the
    generator. The tokens agree until the first row finishes, and not after."""
    model, tokenizer = shipped_tiny
    monkeypatch.setattr(fixed_loop, "draws_live_rows_only", lambda device: False)
    (dynamic, every_row), (state_a, state_b) = both_loops(
        lambda **kw: generate(model, tokenizer, prompts, num_generations=4,
                              max_completion_length=48, **kw))
    first_end = int(dynamic.lengths.min())  # tokens 0..first_end-1 drawn with every row alive
    assert torch.equal(dynamic.completion_ids[:, :first_end],
                       every_row.completion_ids[:, :first_end])
    assert not torch.equal(dynamic.completion_ids, every_row.completion_ids)
    assert not torch.equal(state_a, state_b)


def test_finishing_checks_every_k_tokens_change_nothing(shipped_tiny, prompts, monkeypatch):
    """On a GPU the loop reads "all finished?" every CHECK_EVERY tokens; the extra steps after
    the last row ends are padding and change no output."""
    model, tokenizer = shipped_tiny
    monkeypatch.setattr(fixed_loop, "draws_live_rows_only", lambda device: False)
    stack, calls = torch.stack, []  # the loop reads its counts through one stack: count them
    monkeypatch.setattr(torch, "stack", lambda *a, **k: calls.append(1) or stack(*a, **k))
    results, reads = [], []
    for check_every in (1, 5, 64):
        monkeypatch.setattr(fixed_loop, "CHECK_EVERY", check_every)
        calls.clear()
        results.append(generate(model, tokenizer, prompts, num_generations=2, greedy=True,
                                max_completion_length=48, decoder=Decoder("fixed")))
        reads.append(len(calls))
    assert reads[0] > reads[1] > reads[2] >= 1  # the setting took effect
    for other in results[1:]:
        assert_same_rollout(results[0], other)


@pytest.mark.parametrize("path", ["dynamic", "fixed"])
def test_the_attention_kernel_changes_nothing_beyond_rounding(shipped_tiny, prompts, path):
    """The CPU default (torch's flash kernel for CPUs) against the math kernel."""
    model, tokenizer = shipped_tiny
    runs = []
    for kernel in (None, SDPBackend.MATH):
        with sdpa_kernel([kernel]) if kernel else nullcontext():
            runs.append(generate(model, tokenizer, prompts, num_generations=4,
                                 max_completion_length=48, decoder=Decoder(path),
                                 generator=torch.Generator().manual_seed(1)))
    assert_same_rollout(*runs)


def test_eager_attention_gets_an_additive_mask():
    model, tokenizer = load_policy("tiny", device="cpu", dtype="float32",
                                   attn_implementation="eager")
    prompts = load_split("train").select(range(4))["prompt"]
    (dynamic, fixed), _ = both_loops(
        lambda **kw: generate(model, tokenizer, prompts, num_generations=3,
                              max_completion_length=32, **kw))
    assert_same_rollout(dynamic, fixed)


def test_the_plan_names_the_loop_and_every_fallback(shipped_tiny, monkeypatch):
    model, _ = shipped_tiny
    auto = plan_decoding(model)
    assert (auto.path, auto.cuda_graph) == ("dynamic", False) and "fallback: cpu" in str(auto)
    fixed = plan_decoding(model, "fixed")
    assert (fixed.path, fixed.cuda_graph) == ("fixed", False) and "no CUDA graph on cpu" in str(
        fixed)
    assert plan_decoding(model, "dynamic").path == "dynamic"
    other = copy.deepcopy(model)
    monkeypatch.setattr(other, "_can_compile_fullgraph", False, raising=False)
    assert "does not declare static-cache support" in plan_decoding(other).reason
    with pytest.raises(ValueError, match="decode_path='fixed' needs a static KV cache, and "
                                         "Qwen3ForCausalLM does not declare"):
        plan_decoding(other, "fixed")
    with pytest.raises(ValueError, match=r"decode_path must be one of \('auto', 'dynamic', "
                                         r"'fixed'\), got 'fast'"):
        plan_decoding(model, "fast")
    with pytest.raises(TypeError, match="cuda_graphs must be True or False, got 'yes'"):
        plan_decoding(model, "auto", "yes")


def test_the_config_switches_are_checked():
    with pytest.raises(ValueError, match="decode_path"):
        TrainConfig(decode_path="fast")
    with pytest.raises((TypeError, ValueError), match="cuda_graphs"):
        TrainConfig(cuda_graphs="yes")
    assert TrainConfig().cuda_graphs is True and TrainConfig().decode_path == "auto"


def test_a_run_says_which_loop_samples_when_it_is_not_the_cpu_default(shipped_tiny, capsys):
    """A run on the fixed loop prints the plan and trains on the same completions; a CPU run on
    the default loop prints nothing (the notebooks' outputs stay as committed)."""
    model, tokenizer = shipped_tiny
    data = load_split("train").select(range(16))
    histories = {}
    for path in ("auto", "fixed"):
        config = preset("grpo", max_steps=2, prompts_per_step=4, num_generations=4,
                        max_completion_length=32, decode_path=path, progress=False)
        trainer = Trainer(config, model=copy.deepcopy(model), tokenizer=tokenizer,
                          train_dataset=data)
        histories[path] = trainer.train().history
        printed = capsys.readouterr().out
        if path == "auto":
            assert printed == ""
        else:
            assert "decode loop: fixed-shape loop (static KV cache), eager decode steps; " \
                   "decode_path='fixed' was asked for; no CUDA graph on cpu" in printed
    for column in ("reward", "accuracy", "completion_length", "truncation_rate"):
        assert histories["auto"][column].tolist() == histories["fixed"][column].tolist()


# ---- CUDA (the project's GPU check runs these) ----------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def cuda_tiny():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return load_policy("tiny", device="cuda", dtype="float32")


def cuda_rollout(model, tokenizer, prompts, decoder=None, **settings):
    generator = torch.Generator(device="cuda").manual_seed(0)
    return generate(model, tokenizer, prompts, num_generations=8, max_completion_length=48,
                    generator=generator, decoder=decoder, **settings)


@cuda
def test_cuda_graph_replays_what_eager_steps_compute(cuda_tiny, prompts):
    model, tokenizer = cuda_tiny
    assert plan_decoding(model).cuda_graph
    eager = cuda_rollout(model, tokenizer, prompts, Decoder("fixed", cuda_graphs=False))
    decoder = Decoder("fixed", cuda_graphs=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed capture warns and decodes eagerly
        for _ in range(2):  # a shape is captured at its second use
            graph = cuda_rollout(model, tokenizer, prompts, decoder)
    assert decoder.capture_failure(model) is None
    assert [w.graph is not None for w in decoder.captured.kept(model)] == [True]
    assert_same_rollout(eager, graph)
    assert eager.lengths.unique().numel() > 2


@cuda
def test_cuda_fixed_greedy_matches_the_dynamic_loop(cuda_tiny, prompts):
    model, tokenizer = cuda_tiny
    dynamic, fixed = (cuda_rollout(model, tokenizer, prompts, Decoder(path), greedy=True)
                      for path in ("dynamic", "fixed"))
    assert_same_rollout(dynamic, fixed)


@cuda
def test_cuda_a_captured_step_is_reused_and_reads_weights_updated_in_place(cuda_tiny, prompts):
    model, tokenizer = cuda_tiny
    model = copy.deepcopy(model)
    decoder = Decoder()
    cuda_rollout(model, tokenizer, prompts, decoder, greedy=True)
    cuda_rollout(model, tokenizer, prompts, decoder, greedy=True)
    assert len(decoder.captured.kept(model)) == 1  # one capture for one shape
    with torch.no_grad():  # an optimizer step: the same tensors, new values
        for p in model.parameters():
            p.mul_(1.05)
    graph = cuda_rollout(model, tokenizer, prompts, decoder, greedy=True)
    eager = cuda_rollout(model, tokenizer, prompts, Decoder(cuda_graphs=False), greedy=True)
    assert_same_rollout(eager, graph)


@cuda
def test_cuda_decoding_never_runs_cudnn_attention(cuda_tiny, prompts):
    model, tokenizer = cuda_tiny
    model = copy.deepcopy(model).to(torch.bfloat16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for path in ("dynamic", "fixed"):
            cuda_rollout(model, tokenizer, prompts, Decoder(path, cuda_graphs=False))
    names = {event.name for event in profile.events()}
    assert not [name for name in names if "cudnn_attention" in name]
    assert any("scaled_dot_product" in name for name in names)


@cuda
def test_cuda_lora_adapters_are_not_captured(cuda_tiny):
    from labkit.training.lora import wrap_with_lora

    model, _ = cuda_tiny
    lora = wrap_with_lora(copy.deepcopy(model), TrainConfig(use_peft=True))
    plan = plan_decoding(lora)
    assert (plan.path, plan.cuda_graph) == ("fixed", False) and "peft (LoRA)" in plan.reason



class StepReplay:
    """Stands in for a CUDA graph on the CPU: replays the workspace's eager step."""

    def __init__(self, workspace, model):
        self.workspace, self.model = workspace, weakref.ref(model)  # as a graph: no reference

    def replay(self):
        self.workspace.step(self.model())


def capture_on_the_cpu(workspace, model):
    for _ in range(2):  # the warm-up's writes, which the next load must undo
        workspace.step(model)
    workspace.graph = StepReplay(workspace, model)


@pytest.fixture
def captured(monkeypatch):
    """The CUDA-graph branch of the fixed loop on the CPU: plan says graph, capture replays."""
    monkeypatch.setattr(Decoder, "plan", lambda self, model: (
        plan_decoding(model, self.path, self.cuda_graphs) if self.path == "dynamic"
        else DecodePlan("fixed", True, "test")))
    monkeypatch.setattr(fixed_loop.Workspace, "capture", capture_on_the_cpu)


def test_a_captured_workspace_is_reloaded_for_every_call(shipped_tiny, captured):
    """Calls of one batch size share one captured step (its cache length rounded up to
    GRAPH_LENGTH_BUCKET); each call reloads the prompt, the mask and the counters, whatever the
    warm-up or the previous call, with longer prompts, left in the buffers."""
    model, tokenizer = shipped_tiny
    model = copy.deepcopy(model)
    rows = load_split("train").select(range(40))
    groups = [rows.select(range(i, i + 4))["prompt"] for i in (0, 4, 8)]
    longest = max(range(40), key=lambda i: len(str(rows[i]["prompt"])))
    groups.insert(1, rows.select([longest, 1, 2, 3])["prompt"])  # captured on the longest
    decoder = Decoder("fixed")
    for i, prompts in enumerate(groups):
        (dynamic, fixed), _ = both_loops(
            lambda prompts=prompts, **kw: generate(model, tokenizer, prompts, num_generations=4,
                                                   max_completion_length=40, top_p=0.9, **kw),
            fixed=decoder)
        assert_same_rollout(dynamic, fixed)
        # a shape is kept and captured at its second use
        assert len(decoder.captured.kept(model)) == (i > 0)
    with torch.no_grad():  # weights updated in place (an optimizer step): the same workspace
        for p in model.parameters():
            p.mul_(0.98)
    (dynamic, fixed), _ = both_loops(lambda **kw: generate(
        model, tokenizer, groups[0], num_generations=4, max_completion_length=40, **kw),
        fixed=decoder)
    assert_same_rollout(dynamic, fixed)
    assert len(decoder.captured.kept(model)) == 1
    assert not Decoder("fixed").captured.kept(model)  # another decoder keeps nothing of it


def test_captured_workspaces_keep_neither_model_nor_decoder_alive(shipped_tiny, captured):
    model, tokenizer = shipped_tiny
    decoder = Decoder()
    kept = []
    for _ in range(2):
        model_copy = copy.deepcopy(model)
        for _ in range(2):  # a shape is captured at its second use
            generate(model_copy, tokenizer, load_split("train").select(range(2))["prompt"],
                     num_generations=2, max_completion_length=8, decoder=decoder)
        assert len(decoder.captured.kept(model_copy)) == 1
        kept.append(weakref.ref(decoder.captured.kept(model_copy)[0]))
    gone = weakref.ref(model_copy)
    del model_copy
    gc.collect()
    assert gone() is None and kept[1]() is None  # its static cache, buffers and graph went too
    del decoder
    gc.collect()
    assert kept[0]() is None  # a decoder's workspaces go with it: no module-level cache


def test_a_capture_that_fails_warns_once_and_decodes_eagerly(shipped_tiny, captured,
                                                             monkeypatch):
    model, tokenizer = shipped_tiny
    model = copy.deepcopy(model)

    def fails(workspace, model):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(fixed_loop.Workspace, "capture", fails)
    prompts = load_split("train").select(range(4))["prompt"]
    decoder = Decoder()
    generate(model, tokenizer, prompts, num_generations=4, max_completion_length=32,
             decoder=decoder)  # the shape's first use
    with pytest.warns(UserWarning, match="could not be captured as a CUDA graph .*operation "
                                         "not permitted.*cuda_graphs=False"):
        (dynamic, fixed), _ = both_loops(lambda **kw: generate(
            model, tokenizer, prompts, num_generations=4, max_completion_length=32, **kw),
            fixed=decoder)
    assert_same_rollout(dynamic, fixed)
    assert "operation not permitted" in decoder.capture_failure(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        generate(model, tokenizer, prompts, num_generations=4, max_completion_length=32,
                 decoder=decoder)


@cuda
def test_cuda_training_forwards_never_run_cudnn_attention(cuda_tiny):
    """The training forward changes shape with every length-packed micro-batch: no cuDNN
    attention there either (its backward follows the forward's kernel)."""
    model, tokenizer = cuda_tiny
    trainer = Trainer(preset("grpo", max_steps=1, prompts_per_step=4, num_generations=4,
                             max_completion_length=32, device="cuda", dtype="bfloat16",
                             progress=False),
                      model=copy.deepcopy(model).to(torch.bfloat16), tokenizer=tokenizer,
                      train_dataset=load_split("train").select(range(8)),
                      reward_funcs=[alternating_reward])  # every completion trains
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        row = trainer.training_step()
    assert row["completions_trained"] == 16
    names = {event.name for event in profile.events()}
    assert not [name for name in names if "cudnn_attention" in name]
    assert any("scaled_dot_product" in name for name in names)
