"""Load a policy and its tokenizer: the shipped tiny Qwen, a local folder, or a hub id.

Two model worlds share this one entry point, :func:`load_policy`:

* the **tiny Qwen** shipped in ``data/models/tiny-qwen`` (the default; nothing to download): a real
  ``transformers`` Qwen3 architecture with a character-level tokenizer whose format tags
  (``<think>``, ``</think>``, ``<answer>``, ``</answer>``) are single tokens and a Qwen-style chat
  template. ``python -m labkit build_tiny`` rebuilds it;
* a **real small Qwen** (``Qwen/Qwen2.5-0.5B-Instruct``, ``Qwen/Qwen3-0.6B``...) by hub id, for
  machines with a network and usually a GPU.

``random_init=True`` builds the same architecture from its config alone with fresh weights: the
"RL cannot start from nothing" demo on the tiny model, and the way to measure memory and speed of
a real Qwen shape without downloading weights. The published ``config.json`` of the real shapes in
:data:`SHIPPED_CONFIGS` (``Qwen/Qwen2.5-0.5B-Instruct``, ``Qwen/Qwen3-0.6B``,
``Qwen/Qwen2.5-1.5B-Instruct``) ship in ``data/models/configs`` (the config only: no weights, no
tokenizer files), so ``load_policy(hub_id, random_init=True)`` works offline; see
:func:`load_policy` for what that model is and is not.

Device and dtype default to the best the machine has: cuda, then mps, then cpu; bfloat16 on GPUs
that support it, float32 elsewhere (float16 training needs loss scaling, which the lab avoids).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path

import torch
from torch import nn

from labkit.runtime.compat import cache_kwargs, enable_activation_checkpointing

#: Where the shipped data lives; ``LABKIT_DATA`` overrides it (e.g. a read-only install).
DATA_DIR = Path(os.environ.get("LABKIT_DATA", Path(__file__).resolve().parent.parent / "data"))
TINY_MODEL_DIR = DATA_DIR / "models" / "tiny-qwen"
#: The tiny Qwen warm-started to call tools as well (``python -m labkit build_tools``).
TOOL_MODEL_DIR = DATA_DIR / "models" / "tiny-qwen-tools"

#: Short names accepted by :func:`load_policy` in place of a path or hub id.
ALIASES = {"tiny": TINY_MODEL_DIR, "tiny-tools": TOOL_MODEL_DIR}

#: Where the published ``config.json`` of real Qwen shapes ship (one folder per hub id, named
#: ``<org>--<name>`` as in the hub's cache): architecture only, no weights, no tokenizer files.
CONFIGS_DIR = DATA_DIR / "models" / "configs"
#: Hub ids whose published config ships in :data:`CONFIGS_DIR`, so that
#: ``load_policy(hub_id, random_init=True)`` and :func:`labkit.scale.memory.memory_plan` work offline.
SHIPPED_CONFIGS = ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-0.6B", "Qwen/Qwen2.5-1.5B-Instruct")

# The chat-control tokens are Qwen's own and *special*: decoders with skip_special_tokens=True
# (TRL's GRPOTrainer, vLLM, pipelines) drop them. The format tags are single *added* tokens that are
# not special, as <think> and </think> are in Qwen3's vocabulary: a format reward and the answer
# extraction see them atomically, and every decoder keeps them in the text it hands to rewards.
PAD_TOKEN = "<|endoftext|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
UNK_TOKEN = "<unk>"
CONTROL_TOKENS = (PAD_TOKEN, IM_START, IM_END, UNK_TOKEN)
FORMAT_TAGS = ("<think>", "</think>", "<answer>", "</answer>")
#: Every token matched whole before the character lookup: ids 0..7, in this order.
SPECIAL_TOKENS = (*CONTROL_TOKENS, *FORMAT_TAGS)
#: Qwen's tool-call tags, single added tokens (not special, as in Qwen's vocabulary) of the tool
#: model's tokenizer only; they come after every id of the tiny tokenizer, so its weights carry over.
TOOL_TAGS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")
#: Every ordinary character the tokenizer knows: newline and printable ASCII.
CHARACTERS = "\n" + "".join(chr(c) for c in range(0x20, 0x7F))

#: Qwen's chat layout (ChatML): one ``<|im_start|>role\\n ... <|im_end|>\\n`` block per message.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: The tool model's chat layout: Qwen's for tools (Hermes format). An assistant message's tool
#: calls follow its content as ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``;
#: a tool message becomes a user turn ``<tool_response>\\n...\\n</tool_response>``. The tool
#: schemas are not rendered (a character model has no room for them; the warm start taught the
#: one calling convention), so TRL's ``apply_chat_template(tools=...)`` leaves the prompt as is.
TOOL_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message['content'] + '\\n</tool_response>"
    "<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') }}"
    "{%- for call in message.get('tool_calls') or [] %}"
    "{%- set function = call['function'] if call['function'] is defined else call %}"
    "{{- '<tool_call>\\n{\"name\": ' + function['name'] | tojson + ', \"arguments\": ' "
    "+ function['arguments'] | tojson + '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


#: How a reply of the tool model splits into message fields (transformers' response-template
#: format, read by ``tokenizer.parse_response`` and by TRL's GRPOTrainer to find tool calls): text,
#: then JSON tool calls between the tool-call tags, up to the end of the turn. Unlike Qwen3's
#: template it does not split a ``<think>`` block into ``reasoning_content``: the parse drops an
#: empty ``<think></think>`` and the whitespace after it, so a format reward would judge other
#: text under TRL than in the lab. Kept in ``content``, every reward sees what the policy wrote.
#: The tool model's tokenizer carries it (transformers >= 5.13 saves it).
TOOL_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {"open": "<tool_call>", "close_pattern": r"</tool_call>\s*",
                       "repeats": True, "content": "json",
                       "transform": {"type": "function", "function": "{content}"}},
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def build_char_tokenizer(tool_tags: bool = False):
    """Build the tiny model's character-level tokenizer as a ``transformers`` fast tokenizer.

    Ids 0..3 are the chat-control tokens (pad, ``<|im_start|>``, ``<|im_end|>``, unknown), special
    as in Qwen; ids 4..7 the four format tags, added but *not* special (Qwen3's ``<think>`` is
    the same kind), so ``decode(..., skip_special_tokens=True)`` keeps them; then one id per
    character of :data:`CHARACTERS`. Any other character (non-ASCII) maps to ``<unk>``.
    ``eos_token`` is ``<|im_end|>``, so generation stops at the end of the assistant turn, as with
    Qwen's instruct models. ``tool_tags=True`` adds :data:`TOOL_TAGS` after every other id (the
    tool model's tokenizer) and :data:`TOOL_CHAT_TEMPLATE`, which renders tool calls.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARACTERS:
        vocab[ch] = len(vocab)
    # A BPE model with no merges is exactly a character lookup; added tokens are matched whole
    # before it runs, and Fuse() joins characters back without inserting spaces.
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK_TOKEN))
    core.add_special_tokens(list(CONTROL_TOKENS))
    tags = (*FORMAT_TAGS, *TOOL_TAGS) if tool_tags else FORMAT_TAGS
    core.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in tags])
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        unk_token=UNK_TOKEN,
        additional_special_tokens=[IM_START],
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=1024 if tool_tags else 512,
    )
    tok.chat_template = TOOL_CHAT_TEMPLATE if tool_tags else CHAT_TEMPLATE
    if tool_tags:
        tok.response_template = TOOL_RESPONSE_TEMPLATE
    return tok


def tiny_qwen_config(vocab_size: int, **overrides):
    """The tiny model's architecture: a genuine Qwen3 config, about 0.8M parameters by default.

    Shapes follow Qwen3's conventions at a small scale: grouped-query attention (4 query heads
    sharing 2 key/value heads), q/k RMS-norm, SwiGLU MLP with 3x expansion, tied embeddings.
    """
    from transformers import Qwen3Config

    fields = {
        "vocab_size": vocab_size,
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 512,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
    }
    fields.update(overrides)
    return Qwen3Config(**fields)


def pick_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> cuda if available, else mps, else cpu; anything else is passed to torch."""
    if str(device) != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
#: Accepted ``dtype`` names (``TrainConfig.dtype`` trains in all of them but float16).
DTYPES = ("auto", *_DTYPES)


def pick_dtype(device: torch.device, dtype: str | torch.dtype = "auto") -> torch.dtype:
    """``"auto"`` -> bfloat16 on a GPU that supports it, else float32.

    float16 is available on request but not chosen automatically: training in it without a loss
    scaler underflows small gradients, and the lab's losses have many.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype != "auto":
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be 'auto' or one of {sorted(_DTYPES)}, got {dtype!r}")
        return _DTYPES[dtype]
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def resolve_model_path(name_or_path: str | os.PathLike) -> str:
    """Map an alias (``"tiny"``) to its folder; leave local paths and hub ids as they are."""
    return str(ALIASES.get(str(name_or_path), name_or_path))


def shipped_config_dir(name: str | os.PathLike) -> Path | None:
    """The folder of ``name``'s shipped ``config.json`` (``data/models/configs/<org>--<name>``)
    when ``name`` is one of :data:`SHIPPED_CONFIGS` and is not a local folder; else None."""
    name = str(name)
    if name not in SHIPPED_CONFIGS or Path(name).exists():
        return None
    folder = CONFIGS_DIR / name.replace("/", "--")
    return folder if (folder / "config.json").is_file() else None


def load_model_config(name_or_path: str | os.PathLike = "tiny"):
    """The ``transformers`` config of a model: the tiny Qwen's, a shipped real shape's (offline,
    :data:`SHIPPED_CONFIGS`), a local folder's, or a hub id's (which needs the network)."""
    from transformers import AutoConfig

    shipped = shipped_config_dir(name_or_path)
    return AutoConfig.from_pretrained(shipped or resolve_model_path(name_or_path))


def load_policy(
    name_or_path: str | os.PathLike = "tiny",
    *,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    random_init: bool = False,
    seed: int | None = None,
    gradient_checkpointing: bool = False,
    attn_implementation: str | None = None,
):
    """Load a causal LM and its tokenizer, ready for sampling and training.

    Parameters
    ----------
    name_or_path: ``"tiny"`` (the shipped tiny Qwen), a local folder saved with
        ``save_pretrained``, or a hub id such as ``"Qwen/Qwen2.5-0.5B-Instruct"``.
    device, dtype: ``"auto"`` picks cuda > mps > cpu and bf16 where supported (see
        :func:`pick_dtype`).
    random_init: build the architecture from its config with freshly initialised weights (needs
        only the config and tokenizer files; seeded by ``seed``).
    gradient_checkpointing: trade compute for activation memory on long sequences.

    Returns ``(model, tokenizer)``; the tokenizer pads on the left, which batched generation needs.

    Real shapes offline: with ``random_init=True`` and a hub id of :data:`SHIPPED_CONFIGS`
    (``"Qwen/Qwen2.5-0.5B-Instruct"``, ``"Qwen/Qwen3-0.6B"``, ``"Qwen/Qwen2.5-1.5B-Instruct"``),
    nothing is downloaded: the model is built from the published ``config.json`` shipped in
    ``data/models/configs`` (every layer, the 151,936-token vocabulary, tied embeddings: the real
    parameter count, memory and compute), and the tokenizer is the lab's character tokenizer
    (:func:`build_char_tokenizer`), not Qwen's BPE. Its 104 ids are a subset of the model's
    vocabulary, so prompts and rewards are the lab's text while every logit, gradient and cache
    has the real shape. Random weights spread their probability over all 151,936 ids, so sampled
    tokens are almost never among the tokenizer's 104: completions decode to (nearly) empty text
    and run to ``max_completion_length``. Use it to measure memory and speed, never quality; a
    reward that does not read the text (e.g. one that alternates within each group) keeps the
    advantages non-zero so the training forward runs. The model's generation config stops at the
    tokenizer's end-of-turn id. Loading real weights (``random_init=False``) still takes the
    hub's tokenizer and weights, as before.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path)
    shipped = shipped_config_dir(path) if random_init else None
    if path == str(TINY_MODEL_DIR) and not TINY_MODEL_DIR.exists():
        raise FileNotFoundError(
            f"The tiny model is missing from {TINY_MODEL_DIR}; rebuild it with "
            "`python -m labkit build_tiny`."
        )
    dev = pick_device(device)
    dt = pick_dtype(dev, dtype)
    kwargs = {}
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    tokenizer = build_char_tokenizer() if shipped else AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if random_init:
        if seed is not None:
            torch.manual_seed(seed)
        config = AutoConfig.from_pretrained(shipped or path)
        model = AutoModelForCausalLM.from_config(config, dtype=dt, **kwargs)
    else:
        model = quietly(AutoModelForCausalLM.from_pretrained, path, dtype=dt, **kwargs)
    model.to(dev)
    if gradient_checkpointing:
        enable_activation_checkpointing(model)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if shipped:  # the published ids (151643/151645) are not the character tokenizer's
        model.generation_config.bos_token_id = None
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


def attention_kernels(device):
    """The attention kernels labkit runs on ``device``, a context manager around the sampler's
    forwards, the trainer's scoring and training forwards, and the trainer's backward (with
    gradient checkpointing the backward recomputes the forward, which must pick the same kernels:
    torch refuses a recomputation whose saved tensors differ).

    * **CUDA**: flash, then memory-efficient, then math SDPA; cuDNN's attention is left out on
      purpose. PyTorch prefers cuDNN's on Hopper, and cuDNN builds an execution plan for every new
      (batch, key length) shape: on one H100 (torch 2.11+cu130; the project's GPU check, not
      measured here) that planning took 83% of the host time of a sampling round (9.8 ms per
      call, 26.5 ms per decode step of the tiny Qwen), and switching it off alone gave 4.5 ms per
      step. cuDNN's attention has also been reported to corrupt greedy decoding on B200 for
      models with fewer than 8 key/value heads (the Qwen2.5-0.5B and 1.5B shapes have 2). The
      fixed-shape loop (:mod:`labkit.sampling`) passes a mask, which flash does not take, so its
      steps run the memory-efficient kernel; the prefill without padding can run flash. The
      training forwards change shape with every micro-batch too (length-packed), so they get
      the same choice.
    * **CPU and MPS**: torch's own choice, unchanged. On the CPU that is the flash kernel for
      CPUs (bit for bit the same output as asking for it). Measured on a 2-core AMD EPYC (torch
      2.13.0+cpu, one thread, float32, the machine shared, medians of 4): a sampling round of
      the tiny Qwen, 16 prompts x 8, 64 tokens, took 0.86 s with the default, 1.06 s with the
      math kernel (same tokens); the fixed-shape loop took 1.52 s with the default and 2.27 s
      with math. Every committed notebook output was computed with the default, so it stays: a
      different kernel sums in another order and changes seeded CPU runs.
    """
    if torch.device(device).type != "cuda":
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.MATH])


def quietly(load, *args, **kwargs):
    """Call a ``from_pretrained`` without its per-file progress bar (noise in a notebook cell for
    a model that loads in a blink); the bar setting is restored afterwards."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return load(*args, **kwargs)
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


class ValueModel(nn.Module):
    """A critic for PPO: a copy of the policy's transformer trunk with a scalar head.

    ``forward(input_ids, attention_mask, position_ids) -> values`` of shape ``(B, T)``: the value
    of the state *before* each position's token is predicted, read from the hidden state at that
    position. Initialising the trunk from the policy (as verl and OpenRLHF do when no reward model
    is given) means the critic starts with useful features; the head starts at zero so the first
    value estimates are 0 and the first advantages equal the returns.
    """

    def __init__(self, policy: nn.Module):
        super().__init__()
        import copy

        self.trunk = copy.deepcopy(policy.get_decoder())
        hidden = policy.config.hidden_size
        param = next(policy.parameters())
        self.head = nn.Linear(hidden, 1, device=param.device, dtype=param.dtype)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, input_ids, attention_mask=None, position_ids=None, *,
                cache=None, values_to_keep: int = 0):
        """Values (B, T); ``values_to_keep = k`` keeps the last k positions only, and ``cache``
        continues from a KV cache (the trainer's shared-prompt forward)."""
        out = self.trunk(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, **cache_kwargs(cache))
        hidden = out.last_hidden_state
        return self.head(hidden[:, -values_to_keep:] if values_to_keep else hidden).squeeze(-1)


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
