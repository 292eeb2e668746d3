"""Tests for labkit.tasks.gsm8k, offline: a local fixture stands in for the hub dataset."""

from pathlib import Path

import datasets
import pytest

from labkit.rewards import accuracy_reward, format_reward
from labkit.tasks import task_features
from labkit.tasks.gsm8k import GSM8K_SYSTEM_PROMPT, extract_gsm8k_answer, load_gsm8k

FIXTURE = Path(__file__).parent / "fixtures" / "gsm8k_tiny.jsonl"


def test_extract_gsm8k_answer():
    assert extract_gsm8k_answer("2 * 36 = <<2*36=72>>72\n#### 72") == "72"
    assert extract_gsm8k_answer("so 1,200 chairs\n#### 1,200 ") == "1200"
    assert extract_gsm8k_answer("#### 3\nfixed: #### -4") == "-4"
    with pytest.raises(ValueError, match="####"):
        extract_gsm8k_answer("the answer is 72")


def test_load_gsm8k_from_a_local_file():
    ds = load_gsm8k("test", path=FIXTURE)
    assert ds.features == task_features()
    assert ds["answer"] == ["62", "270", "135", "1200", "35", "21"]
    assert set(ds["family"]) == {"gsm8k"} and set(ds["difficulty"]) == {0}
    assert ds["id"][:2] == ["gsm8k-test-00000", "gsm8k-test-00001"]
    row = ds[0]
    assert row["prompt"] == [{"role": "system", "content": GSM8K_SYSTEM_PROMPT},
                             {"role": "user", "content": row["question"]}]
    assert row["numbers"] == [] and row["target"] is None
    bare = load_gsm8k("test", path=FIXTURE, system_prompt=None)
    assert bare[0]["prompt"] == [{"role": "user", "content": row["question"]}]


def test_the_task_rewards_score_gsm8k_rows():
    ds = load_gsm8k("train", path=FIXTURE)
    cols = {key: ds[key] for key in ds.column_names if key != "prompt"}
    good = [f"<think>steps</think><answer>{a}</answer>" for a in ds["answer"]]
    assert accuracy_reward(ds["prompt"], good, **cols) == [1.0] * 6
    assert format_reward(ds["prompt"], good) == [1.0] * 6
    chairs = ["$1,200", "1200.0", "1,200", " 1200. ", "120", "1200 chairs", ""]
    texts = [f"<answer>{a}</answer>" for a in chairs]
    row = {"answer": ["1200"] * len(texts), "family": ["gsm8k"] * len(texts)}
    assert accuracy_reward(None, texts, **row) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_without_a_path_it_asks_the_hub_for_openai_gsm8k(monkeypatch):
    calls, real_load_dataset = [], datasets.load_dataset

    def fake_load_dataset(name, *args, **kwargs):  # stands in for the network
        calls.append((name, args, kwargs))
        return real_load_dataset("json", data_files=str(FIXTURE), split="train")

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_gsm8k("test")
    assert calls[0] == ("openai/gsm8k", ("main",), {"split": "test"})
    assert len(ds) == 6 and ds[0]["id"] == "gsm8k-test-00000"
