"""Test-wide settings: everything runs offline and on the CPU's deterministic path, and a
deprecation that labkit's own calls trigger in a dependency fails the test that triggered it."""

import os

import pytest

from labkit.runtime.compat import escalate_dependency_warnings

# Nothing in the tests may reach a model hub; fail fast instead of hanging on a download.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


#: Seconds each long-running file takes on one worker (the 2-core CI machine, measured with
#: ``pytest --durations`` and ``python -m labkit section_times``). The suite runs these first,
#: longest first, so that two workers finish together instead of one running the longest file
#: alone at the end (``--dist loadfile --no-loadscope-reorder`` in pyproject.toml keeps this
#: order). A new file that takes more than a minute belongs here.
LONG_FILES = {
    "notebooks/08_rewards_data.ipynb": 199,
    "tests/test_fuzz_round2.py": 120,
    "notebooks/07_exploration.ipynb": 118,
    "notebooks/06_gfpo_length.ipynb": 109,
    "notebooks/09_scaling_up.ipynb": 109,
    "notebooks/01_ppo.ipynb": 106,
    "notebooks/05_gspo.ipynb": 100,
    "tests/test_browser.py": 80,
    "notebooks/10_agents.ipynb": 69,
    "notebooks/04_dapo.ipynb": 69,
    "notebooks/02_grpo.ipynb": 90,
    "notebooks/11_async.ipynb": 57,
    "tests/test_real_shapes.py": 55,
    "tests/test_hub.py": 50,
    "tests/test_trl_compat.py": 50,
    "notebooks/03_baselines.ipynb": 48,
    "tests/test_check.py": 30,
}


def pytest_collection_modifyitems(config, items):
    """Order the files longest first (:data:`LONG_FILES`); a file's own order is kept."""
    def cost(item) -> float:
        path = item.path.relative_to(config.rootpath).as_posix()
        return LONG_FILES.get(path, 0)

    items.sort(key=lambda item: -cost(item))  # stable: files stay whole and in order


@pytest.fixture(autouse=True)
def _no_deprecated_calls():
    """The whole suite runs as if with ``-W error::FutureWarning -W error::DeprecationWarning``,
    restricted to warnings raised while labkit is on the call stack (labkit.runtime.compat)."""
    undo = escalate_dependency_warnings()
    yield
    undo()


@pytest.fixture
def one_thread():
    """The tiny model's matmuls are too small for two threads; on a shared 2-core machine a
    second thread only waits (measured 10x slower under load). Files opt in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def random_tiny():
    """A randomly initialised tiny Qwen3 (seed 0) with the lab's character tokenizer, and 64 rows
    of the train split: for tests of the machinery, where what the model knows does not matter."""
    import torch
    from transformers import Qwen3ForCausalLM

    from labkit.models import build_char_tokenizer, tiny_qwen_config
    from labkit.tasks import load_split

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen_config(len(tokenizer)))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer, load_split("train").select(range(64))


@pytest.fixture(scope="module")
def shipped_tiny():
    """The shipped, warm-started tiny Qwen and its tokenizer, on the CPU in float32."""
    from labkit.models import load_policy

    return load_policy("tiny", device="cpu", dtype="float32")

