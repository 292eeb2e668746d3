"""A memory planner: what a training run will hold in memory, component by component, before launch.

:func:`memory_plan` reads a model's architecture (a ``transformers`` config, or a name
:func:`labkit.models.load_model_config` knows, offline for the shipped Qwen shapes) and a
:class:`labkit.config.TrainConfig`, and returns a table: one row per component, its bytes, GiB
and the formula in words, then the total. :func:`gpu_table` / :func:`gpu_fits` compare the total
with GPU sizes and :func:`plot_memory_plan` draws the bill as stacked bars.

Symbols (read from the model config; ``s`` = bytes per element of the training dtype, 4 for
float32, 2 for bfloat16):

=======  ==========================================  ===========  ============
symbol   meaning                                     tiny Qwen    Qwen2.5-0.5B
=======  ==========================================  ===========  ============
``L``    decoder layers (``num_hidden_layers``)      4            24
``d``    hidden size (``hidden_size``)               128          896
``d_ff`` MLP width (``intermediate_size``)           384          4,864
``V``    vocabulary (``vocab_size``)                 104          151,936
``h``    query heads (``num_attention_heads``)       4            14
``h_kv`` key/value heads (``num_key_value_heads``)   2            2
``hd``   head dimension (``head_dim``, d / h)        32           64
``N``    parameters (tied embeddings counted once)   0.8 M        494 M
``r``    LoRA rank (``lora_r``, with ``use_peft``)
``n``    trainable parameters: N, or the adapters'   N            N
=======  ==========================================  ===========  ============

Run sizes (from the TrainConfig): ``G`` = ``num_generations``, ``p`` = ``prompts_per_step`` (all
sampled in one batch by :func:`labkit.sampling.generate`), ``P`` = prompt length (the argument
``prompt_length``), ``C`` = ``max_completion_length``, ``T = P + C``, ``b`` = completions per
micro-batch (``micro_batch_size``, else the whole mini-batch), ``c`` = rows of one chunk of the
chunked log-probs (``2**24 // V``, at most ``b (C + 1)``).

===========================  =========================================================  ==========
component                    bytes                                                      live in
===========================  =========================================================  ==========
weights                      ``N s`` (+ ``4 n`` for float32 LoRA adapters)              all phases
gradients                    ``n s_n`` (``s_n`` = bytes of a trainable parameter)       train, step
optimizer state              AdamW: ``2 n s_n`` (exp_avg, exp_avg_sq); SGD: 0           all phases
master weights               ``4 n`` with ``master_weights=True`` (mixed precision,     all phases
                             moments then float32: ``2 n 4``); none by default
optimizer step temporaries   ``n s_n`` (``rollback_nonfinite_weights``' copy) + AdamW's  step
                             ``sqrt(exp_avg_sq)``: ``n s_n`` on CUDA (foreach), twice
                             the largest tensor on the CPU (one tensor at a time)
activations                  ``b T a_L`` per layer x L; with shared prompts (no         train
                             checkpointing, ``u = min(p, b) < b`` distinct prompts)
                             ``(u P + b C) a_L + b P 2 h hd s`` per layer x L; with
                             checkpointing ``b T d s`` per layer x L + one layer's
                             ``b T a_L``; + ``2 d s`` per token (final norm, output
                             layer input)
logits                       ``2 b (C+1) V s`` (logits and their gradient) +            train
                             ``2 c V 4`` (two float32 chunks of :mod:`labkit.logprobs`)
KV cache (sampling)          ``G p T L h_kv hd 2 s'`` (keys and values; ``s'`` the      sampling;
                             sampler's dtype, ``sampling_dtype`` or the training one);  all with
                             with a CUDA graph T rounded up to 64 and the cache kept    a graph or
                             allocated between rounds (:mod:`labkit.sampling`)            overlapped
sampling logits              ``5 G p V 4`` (float32 logits, scaled, log-softmax,         sampling;
                             its exp and the entropy product, one decoding step)        all when
                                                                                        overlapped
KV caches (other graphs)     with a CUDA graph, the static cache of every other shape   all phases
                             sampled again and again: dynamic sampling's refill
                             rounds (``n G`` rows, n < p), evaluation (``eval_k`` x a
                             batch of up to 64 prompts, and the last batch), ReMax's
                             greedy baseline (p rows); at most 4 graphs per model, the
                             largest counted
sampler copy                 ``(N + n_LoRA) s'``: the policy in ``sampling_dtype``,      all phases
                             synced every step
sampling thread's weights    ``async_mode="overlapped"``: two copies of the sampler's   all phases
                             weights (the ones the trainer publishes, the thread's)
reference model              ``N s`` when beta > 0 without LoRA; 0 when beta = 0 or     all phases
                             with LoRA (the base with adapters disabled)
critic (PPO)                 ``N_c s (1 + 1 + 2)`` weights, gradients, AdamW state;      all phases
                             ``N_c`` = N minus an untied output layer, plus ``d + 1``
critic activations (PPO)     ``L b T a_L + b T d s`` (same trunk, no logits)             train
total                        the largest phase: sampling, train (forward + backward of  --
                             one micro-batch) or step (clip + AdamW update); in
                             overlapped mode the sampling thread's buffers count in all
===========================  =========================================================  ==========

Activations per layer and token, ``a_L`` (bytes). Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models" (arXiv 2205.05198), section 4.1, eq. 1, count
``34 d + 5 h T`` bytes per token per layer for a GPT layer in 16-bit (attention 11 d + 5 h T,
MLP 19 d, two LayerNorms 4 d), and eq. 2 divides parts of it by the tensor-parallel size; with
full recomputation (section 4.3) only each layer's input ``2 d`` stays. Adapted here to a Qwen
decoder layer as ``transformers`` runs it, element by element:

* no dropout (Qwen trains with dropout 0): the ``d + 2 h T`` bytes of dropout masks go, and so
  does the ``h T`` score/softmax term, because the SDPA kernels (flash or memory-efficient, CPU
  and CUDA) keep only the log-sum-exp, ``4 h`` bytes per token, not the ``T x T`` scores;
* grouped-query attention: keys and values are projected at ``h_kv`` heads, but with a padding
  mask ``transformers`` repeats them to ``h`` heads before SDPA (``repeat_kv``), and the saved
  copies are the repeated ones: ``q, k, v`` = ``3 h hd s``; SDPA's output and the ``o_proj`` input
  (a contiguous copy of it) = ``2 h hd s``; the q/k/v input ``d s``;
* RMSNorm instead of LayerNorm, each of the two keeping its float32 input ``4 d``, its normalised
  value ``d s`` (for the weight's gradient) and ``4`` bytes of inverse RMS; Qwen3's per-head
  q/k norms add ``(h + h_kv) hd (4 + s) + 4 (h + h_kv)``;
* SwiGLU instead of GeLU with ``4 d``: the MLP keeps its input ``d s``, the gate output, SiLU's
  output, the up output and the down input, ``4 d_ff s``.

So ``a_L = s (2 d + 5 h hd + 4 d_ff) + 4 (2 d + 2 + h)`` (+ Qwen3's q/k norms); ``T`` is the
whole ``[prompt | completion]`` row. LoRA keeps the same activations (the frozen layers still
carry the gradient back to the adapters below; an upper bound when few modules are adapted), plus,
with ``lora_dropout > 0``, each adapted module's dropped input ``s`` and mask ``1`` byte per input
feature (in every layer; with gradient checkpointing, in the one layer being recomputed).

What the lab does, and the planner follows: the model trains in one dtype, with no float32 master
weights: in bfloat16 the weights, gradients and both AdamW moments are bfloat16 (``torch.optim.
AdamW`` allocates its moments like the parameter), 8 bytes per parameter, not the 16 of
mixed-precision training with float32 master weights and moments (DeepSpeed, Megatron). peft
keeps LoRA adapters in float32 under a bfloat16 base (``autocast_adapter_dtype``), so adapters,
their gradients and moments cost 16 bytes per adapter parameter. Gradients are set to None after
each optimizer step, so sampling never holds them; the AdamW state stays. The planner counts the
training forward as the trainer runs it: each distinct prompt of a micro-batch once, its
completions on top, whose attention saves the prompt's keys and values once per row (with
gradient checkpointing the trainer uses the plain ``[prompt | completion]`` forward, and so does
the planner); and gradients, activations and logits at once (exact from the second micro-batch
of a step on).

What the planner leaves out: the Python/torch runtime (about 0.4-0.5 GiB of process memory on a
CPU, the CUDA context on a GPU, neither counted by ``torch.cuda.max_memory_allocated``), the
allocator's fragmentation and caching, the data, the tokenizer, and transients smaller than a
chunk (masks, positions, per-token scalars).

Measured against real trainer steps (``python -m labkit bench_memory``: two steps, seed 0, the
peak over both, since AdamW's moments exist only from the second). On the lab's CPU: float32, one
thread, 2 prompts x G = 2 completions of at most 16 tokens, prompts of 30 tokens; measured = the
peak RSS minus the RSS before the model was built, after a warm-up step of the tiny Qwen had
loaded the runtime (about 0.5 GiB of baseline the planner leaves out). On one NVIDIA H100 (bf16,
``torch.cuda.max_memory_allocated``, the sampler's CUDA graph on; ``docs/measurements/gpu_h100.txt``),
prompts of 42 tokens:

==========================================  ==========  ==========  =======  ==============
model and run                               planned     measured    error    largest phase
==========================================  ==========  ==========  =======  ==============
tiny Qwen, CPU, 2 x 2 x 16                  0.018 GiB   0.021 GiB   -15%     train
Qwen2.5-0.5B shape, CPU, 2 x 2 x 16         10.22 GiB   10.44 GiB   -2.1%    optimizer step
Qwen2.5-0.5B shape, H100, 16 x 8 x 64       20.79 GiB   20.39 GiB   +2.0%    train
same, gradient checkpointing                10.03 GiB   8.65 GiB    +16%     train
Qwen3-0.6B shape, H100, 16 x 8 x 128        51.53 GiB   52.86 GiB   -2.5%    train
==========================================  ==========  ==========  =======  ==============

At the 0.5B shape in float32 with a tiny batch the optimizer step is the peak: weights, gradients
and both moments (7.36 GiB) plus the rollback copy (1.84 GiB) and AdamW's per-tensor temporaries
(two copies of the 0.54 GiB embedding). With a real batch on a GPU the training forward's
activations and logits are the peak, and the shared-prompt forward matters: counting plain
``[prompt | completion]`` rows instead planned 26.5 GiB for the 20.06 measured before the
sampler's CUDA graph (+32%). With
gradient checkpointing the plan adds the logits and their gradient to a whole layer's
activations, which are not live at the same time, so it overestimates. At the tiny size the C
allocator's page reuse moves the RSS by megabytes, hence ``tests/test_memory.py``'s factor of 2.

One module per job: :mod:`~labkit.scale.memory.shape` (the model's symbols and parameter counts),
:mod:`~labkit.scale.memory.rows` (the components), :mod:`~labkit.scale.memory.plan`
(:func:`memory_plan`, :func:`phase_totals`) and :mod:`~labkit.scale.memory.gpus` (GPU sizes).
"""

from labkit.scale.memory.gpus import GPU_SIZES_GIB, gpu_fits, gpu_table
from labkit.scale.memory.plan import OPTIMIZERS, memory_plan, phase_totals
from labkit.scale.memory.rows import PHASES
from labkit.scale.memory.shape import lora_trainable_parameters, model_parameters

__all__ = [
    "GPU_SIZES_GIB",
    "OPTIMIZERS",
    "PHASES",
    "gpu_fits",
    "gpu_table",
    "lora_trainable_parameters",
    "memory_plan",
    "model_parameters",
    "phase_totals",
]
