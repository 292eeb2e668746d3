"""Surface 7: LoRA and checkpoints together (``labkit.training.checkpoint``, ``labkit.training.lora``, a
``Trainer`` with ``use_peft``, ``output_dir`` and ``save_every``): resumes that switch LoRA on or
off, a changed base model, truncated or extra files, symlinked folders, a manifest that is not
one. Nothing read from a checkpoint may run code. Runs are one or two steps of a randomly
initialised tiny Qwen (2 prompts x 2 completions of at most 8 tokens)."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import os
import pickle
from pathlib import Path

import torch

from fuzz.harness import Case
from fuzz.scratch import scratch
from labkit.training.checkpoint import CheckpointError

SURFACE = 7
SMALL = {"prompts_per_step": 2, "num_generations": 2, "max_completion_length": 8,
         "max_steps": 1, "progress": False, "device": "cpu", "dtype": "float32",
         "lora_target_modules": "all-linear", "learning_rate": 1e-3, "warmup_ratio": 0.0}
REFUSALS = (CheckpointError, ValueError)


@functools.cache
def _tokenizer_and_data():
    from labkit.models import build_char_tokenizer
    from labkit.tasks import load_split

    return build_char_tokenizer(), load_split("train").select(range(16))


@functools.cache
def _base(seed: int = 0, hidden: int = 128):
    from transformers import Qwen3ForCausalLM

    from labkit.models import tiny_qwen_config

    tokenizer, _ = _tokenizer_and_data()
    torch.manual_seed(seed)
    overrides = {} if hidden == 128 else {"hidden_size": hidden, "intermediate_size": 3 * hidden}
    model = Qwen3ForCausalLM(tiny_qwen_config(len(tokenizer), **overrides))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def _alternating(prompts, completions, **columns):
    return [float(i % 2 == 0) for i in range(len(completions))]


def _trainer(seed=0, hidden=128, **overrides):
    from labkit.config import preset
    from labkit.trainer import Trainer

    tokenizer, data = _tokenizer_and_data()
    return Trainer(preset("grpo", **{**SMALL, **overrides}), model=copy.deepcopy(
        _base(seed, hidden)), tokenizer=tokenizer, train_dataset=data,
        reward_funcs=[_alternating])


def _saved(lora: bool, steps: int = 1) -> Path:
    """A checkpoint folder after ``steps`` steps, with or without LoRA."""
    trainer = _trainer(use_peft=lora, max_steps=steps)
    trainer.train()
    return trainer.save_checkpoint(scratch("ckpt") / "checkpoint")


def _weights(model) -> dict:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _rewrite_manifest(folder: Path, name: str) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest[name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _truncate(folder: Path, name: str, update_manifest: bool) -> Path:
    path = folder / name
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    if update_manifest:
        _rewrite_manifest(folder, name)
    return folder


def _resume(folder, lora: bool, seed=0, hidden=128, steps=2):
    trainer = _trainer(seed, hidden, use_peft=lora, max_steps=steps, resume_from=str(folder))
    return trainer


class _Payload:
    """Pickled, this would create ``marker`` when unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def _booby_trapped(lora: bool):
    """A checkpoint with code offered every way: a pickled payload under a .pt name, a
    config.json whose auto_map names a module beside it, and that module."""
    folder = _saved(lora)
    marker = folder.parent / "code-ran"
    with (folder / "extra_state.pt").open("wb") as f:
        pickle.dump({"x": _Payload(marker)}, f)
    model = folder / "model"
    (model / "evil_modeling.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    config = json.loads((model / "config.json").read_text()) if (
        model / "config.json").exists() else {}
    config["auto_map"] = {"AutoModelForCausalLM": "evil_modeling.Evil"}
    (model / "config.json").write_text(json.dumps(config))
    _rewrite_manifest(folder, "model/config.json") if (folder / "model/config.json").exists() \
        else None
    return folder, marker


def _no_code_ran(lora: bool):
    def call():
        folder, marker = _booby_trapped(lora)
        trainer = _resume(folder, lora)
        trainer.train()
        return marker.exists(), trainer.step
    return call


def _nothing_ran(result):
    ran, step = result
    assert not ran, "a file in the checkpoint ran code"
    assert step == 2, f"resumed run stopped at step {step}"


def _resumed_to(step):
    def check(trainer):
        assert trainer.step == step, f"step {trainer.step}, expected {step}"
    return check


def _bitwise_resume(lora: bool):
    """Two straight steps vs one step, a checkpoint, a fresh trainer and one more step."""
    def call():
        from labkit.trainer import TIMING_COLUMNS

        straight = _trainer(use_peft=lora, max_steps=2)
        straight.train()
        out = scratch("save-every")
        first = _trainer(use_peft=lora, max_steps=1, save_every=1, output_dir=str(out))
        first.train()
        resumed = _trainer(use_peft=lora, max_steps=2, save_every=1, output_dir=str(out),
                           resume_from=str(out / "checkpoint-1"))
        resumed.train()
        drop = [c for c in TIMING_COLUMNS if c in straight.history]
        same_history = straight.history.drop(columns=drop).equals(
            resumed.history.drop(columns=drop))
        a, b = _weights(straight.model), _weights(resumed.model)
        return same_history, all(torch.equal(a[k], b[k]) for k in a)
    return call


def _both_true(result):
    history, weights = result
    assert history, "the resumed history differs from the straight run's"
    assert weights, "the resumed weights differ from the straight run's"


def _changed_full_base():
    folder = _saved(False)
    saved = _weights(_resume(folder, False).model)
    resumed = _resume(folder, False, seed=1)
    return saved, _weights(resumed.model)


def _same_weights(pair):
    a, b = pair
    assert all(torch.equal(a[k], b[k]) for k in a), "a changed base leaked into the resume"


def _symlinked(lora: bool):
    folder = _saved(lora)
    link = scratch("link") / "latest"
    os.symlink(folder, link, target_is_directory=True)
    return _resume(link, lora)


def _save_twice_through_a_link():
    trainer = _trainer(max_steps=1)
    trainer.train()
    real = scratch("real") / "checkpoint"
    trainer.save_checkpoint(real)
    link = scratch("link") / "checkpoint"
    os.symlink(real, link, target_is_directory=True)
    trainer.save_checkpoint(link)
    trainer.save_checkpoint(link)
    from labkit.training.checkpoint import load_state

    return load_state(link)["step"], link.is_symlink(), real.is_dir()


def _saved_through_link(result):
    step, still_link, real = result
    assert step == 1 and still_link and real, f"step {step}, link {still_link}, real {real}"


def _extra(lora: bool, name: str, content: bytes | None = None, tensor_name: str | None = None):
    folder = _saved(lora)
    path = folder / name
    if tensor_name is not None:
        from safetensors.torch import save_file

        reference = _weights(_resume(folder, lora).model)[tensor_name]
        save_file({tensor_name.removeprefix("base_model.model."): torch.zeros_like(reference)},
                  str(path))
    else:
        path.write_bytes(content)
    return folder


def _manifest(folder: Path, text: str) -> Path:
    (folder / "manifest.json").write_text(text)
    return folder


def cases() -> list[Case]:
    c = []

    def refuse(name, call, *fragments, errors=REFUSALS):
        c.append(Case(SURFACE, name, call, tuple(fragments), errors=errors, seconds=30.0,
                      prepare=_tokenizer_and_data))

    def accept(name, call, check):
        c.append(Case(SURFACE, name, call, None, check=check, seconds=30.0,
                      prepare=_tokenizer_and_data))

    refuse("saved-without-lora-resumed-with", lambda: _resume(_saved(False), True), "use_peft",
           "False -> True")
    refuse("saved-with-lora-resumed-without", lambda: _resume(_saved(True), False), "use_peft",
           "True -> False")
    refuse("lora-rank-changed", lambda: _trainer(use_peft=True, lora_r=4, max_steps=2,
                                                 resume_from=str(_saved(True))), "lora_r")
    refuse("lora-on-another-base-same-shape", lambda: _resume(_saved(True), True, seed=1),
           "base model")
    refuse("lora-on-another-base-other-shape", lambda: _resume(_saved(True), True, hidden=64),
           "checkpoint", "adapter")
    accept("full-on-another-base-same-shape", _changed_full_base, _same_weights)
    refuse("full-on-another-base-other-shape", lambda: _resume(_saved(False), False, hidden=64),
           "checkpoint", "model.safetensors")
    for lora, name in ((True, "model/adapter_model.safetensors"),
                       (False, "model/model.safetensors")):
        tag = "adapter" if lora else "weights"
        refuse(f"truncated-{tag}", lambda lora=lora, name=name: _resume(
            _truncate(_saved(lora), name, False), lora), Path(name).name, "checksum")
        refuse(f"truncated-{tag}-manifest-rewritten", lambda lora=lora, name=name: _resume(
            _truncate(_saved(lora), name, True), lora), Path(name).name)
    for lora in (True, False):
        tag = "lora" if lora else "full"
        accept(f"symlinked-folder-{tag}", lambda lora=lora: _symlinked(lora), _resumed_to(1))
        accept(f"resume-is-bitwise-{tag}", _bitwise_resume(lora), _both_true)
        accept(f"no-code-runs-on-load-{tag}", _no_code_ran(lora), _nothing_ran)
        accept(f"extra-text-file-{tag}", lambda lora=lora: _resume(
            _extra(lora, "notes.txt", b"my run"), lora), _resumed_to(1))
    accept("save-twice-through-a-symlink", _save_twice_through_a_link, _saved_through_link)
    refuse("extra-weights-file-full", lambda: _resume(_extra(
        False, "model/zz-extra.safetensors", tensor_name="model.norm.weight"), False),
        "zz-extra.safetensors", "manifest")
    refuse("extra-weights-file-lora", lambda: _resume(_extra(
        True, "model/zz-extra.safetensors",
        tensor_name="base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight"),
        True), "zz-extra.safetensors", "manifest")
    refuse("manifest-a-list", lambda: _resume(_manifest(_saved(False), "[]"), False),
           "manifest.json", "list")
    refuse("manifest-escapes-the-folder", lambda: _resume(_manifest(
        _saved(False), json.dumps({"../../../etc/hostname": "0" * 64})), False),
        "manifest.json", "'../../../etc/hostname'")
    refuse("manifest-non-utf8", lambda: _resume(_bytes(_saved(False), "manifest.json",
                                                        b"\xff\xfe"), False), "manifest.json")
    refuse("state-file-a-folder", lambda: _resume(_state_folder(_saved(False)), False),
           "trainer_state.pt")
    refuse("resume-from-a-file", lambda: _resume(_bytes(scratch("f"), "ckpt.bin", b"x") /
                                                  "ckpt.bin", False), "ckpt.bin",
           errors=(*REFUSALS, FileNotFoundError))
    refuse("resume-from-nothing", lambda: _resume(scratch("none") / "missing", False), "missing",
           errors=(*REFUSALS, FileNotFoundError))
    refuse("resume-from-an-empty-folder", lambda: _resume(scratch("empty"), False), "empty",
           errors=(*REFUSALS, FileNotFoundError))
    accept("stale-partial-folder-is-replaced", _stale_partial, _resumed_to(1))
    return c


def _bytes(folder: Path, name: str, content: bytes) -> Path:
    (folder / name).write_bytes(content)
    return folder


def _state_folder(folder: Path) -> Path:
    (folder / "trainer_state.pt").unlink()
    (folder / "trainer_state.pt").mkdir()
    return folder


def _stale_partial():
    trainer = _trainer(max_steps=1)
    trainer.train()
    target = scratch("stale") / "checkpoint"
    partial = target.with_name(target.name + ".partial")
    partial.mkdir()
    (partial / "junk").write_text("half a save")
    trainer.save_checkpoint(target)
    return _resume(target, False)
