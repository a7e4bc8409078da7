"""Roofline cost model, GPU profiles, model shapes, clocks: exact and order-of-magnitude checks."""
import pytest

from inferlab.core.shapes import (MODEL_SHAPES, ModelShape, kv_bytes_per_token, model_shape,
                                  weight_bytes)
from inferlab.sim.clock import SimulatedClock, WallClock, check_clock, make_clock
from inferlab.sim.costmodel import (allreduce_time, step_bytes, step_flops, step_time,
                                    tensor_parallel)
from inferlab.sim.gpus import BANDWIDTH_EFFICIENCY, FLOPS_EFFICIENCY, GPUS
from inferlab.sim.profiles import get_gpu
from inferlab.errors import InvalidInputError, InvalidTypeError


def test_known_gpu_numbers():
    h100, h200, a100, l4 = (get_gpu(n) for n in ("H100", "H200", "A100", "L4"))
    assert h100.hbm_bandwidth == pytest.approx(3.35e12)
    assert h200.hbm_bandwidth == pytest.approx(4.8e12)
    assert a100.hbm_bandwidth == pytest.approx(2.039e12)
    assert l4.hbm_bandwidth == pytest.approx(300e9)
    assert h100.flops_bf16 == pytest.approx(989.4e12)
    assert h200.flops_bf16 == h100.flops_bf16          # same compute die, more/faster HBM
    assert a100.flops_bf16 == pytest.approx(312e12)
    assert l4.flops_bf16 == pytest.approx(121e12)
    assert h100.memory_bytes == 80e9 and h200.memory_bytes == 141e9
    assert h100.peak_flops(2) == h100.flops_bf16 and h100.peak_flops(4) == h100.flops_tf32
    assert {"H100", "H200", "A100", "L4", "B200"} <= set(GPUS)


def test_get_gpu_names_are_forgiving_and_errors_list_known():
    assert get_gpu("h100") is get_gpu("H100-SXM") is get_gpu("H100")
    assert get_gpu("a100 80gb").name == "A100"
    with pytest.raises(InvalidInputError, match="unknown GPU 'V100'.*H100.*L4"):
        get_gpu("V100")
    with pytest.raises(InvalidTypeError):
        get_gpu(100)


def test_model_shapes_match_published_parameter_counts():
    assert model_shape("llama-3-8b").num_params == pytest.approx(8.03e9, rel=0.005)
    assert model_shape("llama-3-70b").num_params == pytest.approx(70.55e9, rel=0.005)
    assert model_shape("smollm2-135m").num_params == pytest.approx(134.5e6, rel=0.005)
    assert model_shape("mistral-7b").num_params == pytest.approx(7.24e9, rel=0.005)
    assert model_shape("qwen2-7b").num_params == pytest.approx(7.62e9, rel=0.005)
    assert model_shape("Llama-3.1-8B-Instruct") is model_shape("llama-3-8b")
    with pytest.raises(InvalidInputError, match="unknown model shape 'gpt-5'.*llama-3-8b"):
        model_shape("gpt-5")


def test_shape_from_hf_config():
    from transformers import LlamaConfig
    cfg = LlamaConfig(num_hidden_layers=30, hidden_size=576, num_attention_heads=9,
                      num_key_value_heads=3, intermediate_size=1536, vocab_size=49152,
                      tie_word_embeddings=True)
    shape = ModelShape.from_hf_config(cfg, name="smollm2-135m")
    assert shape == MODEL_SHAPES["smollm2-135m"]
    assert ModelShape.from_hf_config(cfg).name == "llama"   # falls back to model_type


def test_byte_helpers():
    s = model_shape("llama-3-8b")
    assert kv_bytes_per_token(s, 2) == 2 * 32 * 8 * 128 * 2 == 131072
    assert weight_bytes(s, 2) == 2 * s.num_params
    assert kv_bytes_per_token(s, 4) == 2 * kv_bytes_per_token(s, 2)


def test_flops_and_bytes_by_hand():
    s = ModelShape("toy", num_layers=2, hidden_size=8, num_heads=2, num_kv_heads=1, head_dim=4,
                   intermediate_size=16, vocab_size=10)
    # prefill 3 tokens: pairs 1+2+3 = 6; one sequence gets logits
    flops = 2 * 2 * s.layer_params * 3 + 2 * 10 * 8 + 4 * 2 * 2 * 4 * 6
    assert step_flops(s, [(3, 3)]) == flops
    kv = kv_bytes_per_token(s, 2)
    weights = (2 * s.layer_params + 8 + 10 * 8) * 2
    assert step_bytes(s, [(3, 3), (1, 10)], 2) == weights + (3 + 10) * kv + 4 * kv
    assert step_bytes(s, [], 2) == 0 and step_time(get_gpu("H100"), s, []) == 0.0


def test_decode_is_bandwidth_bound_and_prefill_compute_bound():
    gpu, s = get_gpu("H100"), model_shape("llama-3-8b")
    compute = lambda ch: step_flops(s, ch) / (gpu.flops_bf16 * FLOPS_EFFICIENCY)
    memory = lambda ch: step_bytes(s, ch, 2) / (gpu.hbm_bandwidth * BANDWIDTH_EFFICIENCY)
    decode = [(1, 512)] * 4
    prefill = [(4096, 4096)]
    assert memory(decode) > 10 * compute(decode)
    assert compute(prefill) > 10 * memory(prefill)
    # batch-1 decode of 8B on H100: ~16 GB of weights at ~2.7 TB/s, a few ms
    assert 4e-3 < step_time(gpu, s, [(1, 128)]) < 8e-3


def test_step_time_orderings():
    h100, s8, s70 = get_gpu("H100"), model_shape("llama-3-8b"), model_shape("llama-3-70b")
    decode = [(1, 1024)] * 8
    assert step_time(h100, s70, decode) > 5 * step_time(h100, s8, decode)
    assert step_time(get_gpu("H200"), s8, decode) < step_time(h100, s8, decode)
    assert step_time(get_gpu("L4"), s8, decode) > 5 * step_time(h100, s8, decode)
    # batching decode is nearly free until compute matters; more context costs KV reads
    assert step_time(h100, s8, [(1, 128)] * 32) < 1.5 * step_time(h100, s8, [(1, 128)])
    assert step_time(h100, s8, [(1, 8192)] * 32) > step_time(h100, s8, [(1, 128)] * 32)
    # prefill time grows with prompt length
    assert step_time(h100, s8, [(4096, 4096)]) > 3 * step_time(h100, s8, [(1024, 1024)])


def test_tensor_parallel():
    h100, s70 = get_gpu("H100"), model_shape("llama-3-70b")
    one, eight = step_time(h100, s70, [(1, 512)]), step_time(h100, s70, [(1, 512)], tp=8)
    assert eight < one / 4                     # weights split 8 ways, plus all-reduce cost
    plan = tensor_parallel(h100, s70, 8)
    assert plan.weight_bytes_per_gpu == weight_bytes(s70) / 8
    assert plan.kv_bytes_per_token_per_gpu == kv_bytes_per_token(s70) / 8
    assert plan.kv_tokens_capacity > 0
    assert tensor_parallel(h100, s70, 1).kv_tokens_capacity == 0   # 141 GB of weights > 80 GB
    assert allreduce_time(h100, 1e6, 1) == 0.0
    assert allreduce_time(h100, 1e9, 8) > allreduce_time(h100, 1e9, 2)
    with pytest.raises(InvalidInputError, match="tp"):
        step_time(h100, s70, [(1, 1)], tp=3)


def test_bad_chunks_name_the_problem():
    with pytest.raises(InvalidInputError, match=r"chunks\[1\]"):
        step_time(get_gpu("H100"), model_shape("llama-3-8b"), [(1, 5), (6, 5)])


def test_simulated_clock():
    gpu, s = get_gpu("A100"), model_shape("llama-3-8b")
    clock = SimulatedClock("a100", s)
    assert clock.name == "A100 (simulated, llama-3-8b shape)"
    assert clock.now() == 0.0
    dt = clock.advance_step([(16, 16), (1, 40)], wall_elapsed=123.0)
    assert dt == step_time(gpu, s, [(16, 16), (1, 40)]) and clock.now() == dt
    clock.skip_to(5.0)
    assert clock.now() == 5.0
    clock.skip_to(1.0)                         # never goes back
    assert clock.now() == 5.0


def test_wall_clock_skips_idle_time():
    clock = WallClock()
    assert clock.name == "wall"
    assert clock.advance_step([(1, 1)], 0.25) == 0.25
    t = clock.now()
    clock.skip_to(t + 100.0)
    assert t + 100.0 <= clock.now() < t + 101.0
    before = clock.now()
    clock.skip_to(0.0)
    assert clock.now() >= before


def test_make_clock_and_engine_config_validation():
    from transformers import LlamaConfig
    from inferlab.core.config import EngineConfig
    assert isinstance(make_clock("wall"), WallClock)
    c = make_clock("H200", sim_model="llama-3-70b")
    assert c.name == "H200 (simulated, llama-3-70b shape)"
    c = make_clock("L4", hf_config=LlamaConfig(), model_name="mine")
    assert c.shape.name == "mine" and c.shape.num_layers == LlamaConfig().num_hidden_layers
    with pytest.raises(InvalidInputError, match="sim_model"):
        make_clock("L4")
    assert EngineConfig(clock="h100").clock == "h100"
    with pytest.raises(InvalidInputError, match="known: .*H100"):
        check_clock("TPU")          # the engine calls it before loading any model
    import inferlab as il
    with pytest.raises(InvalidInputError, match="known: .*H100"):
        il.Engine("tiny", clock="TPU")
