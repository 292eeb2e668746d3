"""The tiny Qwen's tokenizer, chat template and offline loading."""

import json

import pytest
import torch

from labkit.models import (
    FORMAT_TAGS,
    TINY_MODEL_DIR,
    build_char_tokenizer,
    count_parameters,
    load_policy,
    pick_dtype,
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


@pytest.mark.parametrize("text", [
    "347+285=?", "Sort: 9,4,1", "  two  spaces\nand a newline\t",
    "<think>7+5=12 c1,4+8+1=13 c1</think><answer>632</answer>", "",
])
def test_round_trip(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text.replace("\t", "<unk>")


def test_format_tags_are_single_tokens(tokenizer):
    for tag in FORMAT_TAGS:
        ids = tokenizer(tag, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1, f"{tag} should be one token, got {ids}"


@pytest.fixture(scope="module")
def shipped_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TINY_MODEL_DIR)


@pytest.mark.parametrize("which", ["built", "shipped"])
def test_format_tags_survive_skip_special_tokens(tokenizer, shipped_tokenizer, which):
    """TRL, vLLM and pipelines decode with skip_special_tokens=True: the tags must stay in the
    text the reward functions read, while the chat template's control tokens still vanish."""
    tok = tokenizer if which == "built" else shipped_tokenizer
    answer = "<think>1+2</think><answer>3</answer>"
    ids = tok(answer, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == answer
    chat = tok.apply_chat_template([{"role": "user", "content": "1+2=?"},
                                    {"role": "assistant", "content": answer}], tokenize=False)
    decoded = tok.decode(tok(chat, add_special_tokens=False)["input_ids"],
                         skip_special_tokens=True)
    assert decoded == f"user\n1+2=?\nassistant\n{answer}\n"
    for control in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert control in tok.all_special_tokens
    for tag in FORMAT_TAGS:
        assert tag not in tok.all_special_tokens


def test_shipped_tokenizer_is_the_built_one(tokenizer, shipped_tokenizer):
    """data/models/tiny-qwen holds what build_char_tokenizer builds, token for token."""
    assert shipped_tokenizer.get_vocab() == tokenizer.get_vocab()
    assert ({i: (t.content, t.special) for i, t in shipped_tokenizer.added_tokens_decoder.items()}
            == {i: (t.content, t.special) for i, t in tokenizer.added_tokens_decoder.items()})


def test_non_ascii_maps_to_unknown(tokenizer):
    ids = tokenizer("é", add_special_tokens=False)["input_ids"]
    assert ids == [tokenizer.unk_token_id]


def test_chat_template_is_qwen_style(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "1+1=?"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text == "<|im_start|>user\n1+1=?<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token_id != tokenizer.eos_token_id


def test_tokenizer_survives_save_and_load(tokenizer, tmp_path):
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "<think>a b</think><answer>-12</answer>"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
    assert loaded.chat_template == tokenizer.chat_template


def test_bad_dtype_names_allowed_values():
    with pytest.raises(ValueError, match="dtype must be"):
        pick_dtype(torch.device("cpu"), "float8")


def test_auto_dtype_on_cpu_is_float32():
    assert pick_dtype(torch.device("cpu")) == torch.float32


@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="tiny model not built")
def test_shipped_model_loads_offline():
    model, tok = load_policy("tiny", device="cpu")
    assert model.config.model_type in ("qwen2", "qwen3")
    assert type(model).__name__.startswith("Qwen")
    assert model.device.type == "cpu" and model.dtype == torch.float32
    info = json.loads((TINY_MODEL_DIR / "build_info.json").read_text())
    assert count_parameters(model) == info["parameters"]
    size_mb = sum(f.stat().st_size for f in TINY_MODEL_DIR.iterdir()) / 2**20
    assert size_mb < 25, f"committed model folder is {size_mb:.1f} MB; the budget is 25 MB"
    assert tok.padding_side == "left"


@pytest.mark.skipif(not TINY_MODEL_DIR.exists(), reason="tiny model not built")
def test_random_init_keeps_architecture_and_changes_weights():
    trained, _ = load_policy("tiny", device="cpu")
    fresh, _ = load_policy("tiny", device="cpu", random_init=True, seed=0)
    assert type(fresh) is type(trained)
    assert count_parameters(fresh) == count_parameters(trained)
    w_trained = trained.get_input_embeddings().weight
    w_fresh = fresh.get_input_embeddings().weight
    assert not torch.allclose(w_trained, w_fresh)


def test_missing_model_folder_error_names_the_fix(tmp_path, monkeypatch):
    from labkit import models

    monkeypatch.setattr(models, "TINY_MODEL_DIR", tmp_path / "missing")
    monkeypatch.setitem(models.ALIASES, "tiny", tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="build_tiny"):
        models.load_policy("tiny")


def test_attention_kernels_leave_out_cudnn_on_cuda_and_change_nothing_on_the_cpu():
    from labkit.models import attention_kernels

    backends = torch.backends.cuda
    before = (backends.cudnn_sdp_enabled(), backends.flash_sdp_enabled(),
              backends.mem_efficient_sdp_enabled(), backends.math_sdp_enabled())
    with attention_kernels("cuda"):  # sets the kernel flags only: no GPU needed to check them
        assert not backends.cudnn_sdp_enabled()
        assert backends.flash_sdp_enabled() and backends.mem_efficient_sdp_enabled()
        assert backends.math_sdp_enabled()
    with attention_kernels("cpu"):
        assert (backends.cudnn_sdp_enabled(), backends.flash_sdp_enabled(),
                backends.mem_efficient_sdp_enabled(), backends.math_sdp_enabled()) == before
    assert (backends.cudnn_sdp_enabled(), backends.flash_sdp_enabled(),
            backends.mem_efficient_sdp_enabled(), backends.math_sdp_enabled()) == before
