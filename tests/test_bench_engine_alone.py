"""`inferlab bench engine --alone`: inferlab and transformers' padded batch, each in a worker
process of its own, on the tiny model (what it measures is its business; here that both run
the same prompts to the end and their greedy tokens mostly agree)."""
import pytest


@pytest.mark.full("tests/test_parity.py::test_smollm2_greedy_matches_transformers")
def test_each_engine_in_its_own_process_same_prompts_same_tokens():
    from inferlab.bench.engine import bench_engine_alone
    lines = []
    res = bench_engine_alone(num_requests=8, prompt_len=16, new_tokens=8, repeats=1,
                             model="tiny", out=lines.append)
    assert [line.split()[0:2] for line in lines[1:3]] == [["inferlab", "engine"],
                                                          ["transformers", "padded"]]
    # fp32 batched GEMMs may flip a near-tie; garbage or misaligned prompts would flip most
    assert res["same_tokens"] >= 6, res
    assert "each in its own process" in lines[0] and "x   same greedy tokens" in lines[-1]
