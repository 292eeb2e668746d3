"""Token in, token out (labkit.agents.retokenize): a BPE's decode -> encode round trip gives the
canonical ids back, not the ids a sampler emitted; the measurement is deterministic."""

import random

import pytest

from labkit.agents.retokenize import drift_rows, lab_texts, resplit, round_trip, train_bpe
from labkit.tasks import load_split


@pytest.fixture(scope="module")
def texts():
    return lab_texts(load_split("train", families=["add", "mul"], difficulties=[3, 4]).select(range(60)))


@pytest.fixture(scope="module")
def bpe(texts):
    return train_bpe(texts, merges=120)


def test_train_bpe_is_deterministic_and_sized(texts, bpe):
    assert train_bpe(texts, merges=120).to_str() == bpe.to_str()
    assert 256 < bpe.get_vocab_size() <= 256 + 120  # the byte alphabet, then the merges


def test_a_split_token_does_not_survive_the_round_trip():
    # "ab" is the one merge; a sampler that emits "a", "b" gets "ab" back from a text round trip
    bpe = train_bpe(["ab ab ab"] * 4, merges=1)
    ab, a, b = (bpe.token_to_id(t) for t in ("ab", "a", "b"))
    assert round_trip(bpe, [a, b]) == [ab]
    assert round_trip(bpe, [ab]) == [ab]
    assert bpe.decode([a, b]) == bpe.decode([ab]) == "ab"


def test_resplit_keeps_the_text_and_changes_the_ids(texts, bpe):
    rng = random.Random(0)
    for text in texts[:20]:
        canonical = bpe.encode(text).ids
        assert round_trip(bpe, canonical) == canonical  # nothing to drift without a split
        assert resplit(bpe, canonical, 0.0, rng) == canonical
        sampled = resplit(bpe, canonical, 1.0, rng)
        assert bpe.decode(sampled) == text
        multi = sum(len(bpe.id_to_token(i)) > 1 for i in canonical)
        assert len(sampled) >= len(canonical) + multi  # every token of 2+ symbols was split
        assert round_trip(bpe, sampled) == canonical != sampled


def test_drift_rows_count_and_repeat(texts, bpe):
    rows = drift_rows(bpe, texts, rates=(0.0, 0.1, 1.0), seed=3)
    assert rows == drift_rows(bpe, texts, rates=(0.0, 0.1, 1.0), seed=3)
    none, some, every = rows
    assert none["ids changed"] == 0 and none["tokens sampled"] == none["tokens re-encoded"]
    assert 0 < some["ids changed"] < len(texts)
    assert every["ids changed"] == every["sequences"] == len(texts)
    assert every["tokens sampled"] > some["tokens sampled"] > every["tokens re-encoded"]


@pytest.mark.parametrize("call, fragments", [
    (lambda bpe: train_bpe(["ab"], merges=0), ("merges", "0", ">= 1")),
    (lambda bpe: resplit(bpe, [1], 1.5, random.Random(0)), ("rate", "1.5", "[0, 1]")),
    (lambda bpe: round_trip(bpe, [10**6]), ("ids", "1000000", "0 to")),
    (lambda bpe: drift_rows(bpe, []), ("texts", "empty")),
])
def test_bad_arguments_are_refused_by_name(bpe, call, fragments):
    with pytest.raises(ValueError) as error:
        call(bpe)
    assert all(f in str(error.value) for f in fragments), str(error.value)
