"""Chapter 15's fp32-vs-bf16 section: both engines on the same prompts; its bytes come from
the engines' own tensors, its answers from their greedy runs. Removing the effect (bf16 ->
fp32) makes the bytes equal and the answers identical."""
import pytest

from inferlab.lab.chapters import _ch15_precision as prec
from inferlab.lab.chapters import ch15_memory_and_price as ch15


@pytest.fixture(scope="module")
def both():
    return ch15.precision(smoke=True, model="tiny")


@pytest.mark.full("tests/test_parity_half.py::test_smollm2_bf16_matches_transformers_bf16")
def test_bf16_halves_the_bytes_and_every_number_has_its_spread(both):
    e32, e16 = both["engines"]["float32"], both["engines"]["bfloat16"]
    assert (e32["dtype"], e16["dtype"]) == ("float32", "bfloat16")
    assert e16["kv_bytes_per_token"] * 2 == e32["kv_bytes_per_token"]
    assert 0.4 < e16["weights"] / e32["weights"] < 0.6, (e16, e32)
    assert e16["plan"].startswith("bfloat16")
    assert set(both["speed"]) == {f"{d} batch {n}" for d in prec.DTYPES
                                  for n in (1, both["prompts"])}
    for sp in both["speed"].values():
        assert 0 < sp["lo"] <= sp["median"] <= sp["hi"] and sp["n"] == 2
    assert len(both["divergence"]) == both["prompts"] == 4
    for row in both["divergence"]:
        i = row["first_difference"]
        assert i is None or 0 <= i <= row["tokens"]
        assert (row["close_there"] is None) == (i is None or i >= row["tokens"])
    text = ch15.precision_summary(both)
    assert "fp32 vs bf16" in text and "tok/s" in text and "greedy answers" in text
    fig = prec.precision_figure(both)
    assert len(fig.data) == 2 * 2 + 1 and "fp32 and bf16" in fig.layout.title.text


def test_without_half_precision_nothing_differs():
    same = ch15.precision(smoke=True, model="tiny", dtypes=("float32", "float32"))
    e = same["engines"]
    assert e["float32"]["weights"] == e["bfloat16"]["weights"]
    assert e["float32"]["kv_bytes_per_token"] == e["bfloat16"]["kv_bytes_per_token"]
    assert all(r["first_difference"] is None for r in same["divergence"])
    assert "4 of 4 the same" in ch15.precision_summary(same)


def test_first_difference():
    assert prec.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert prec.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert prec.first_difference([1, 2], [1, 2, 3]) == 2
