"""The engine's own weight file (model/weights.py, model/engine_files.py) and the kernels
compiled once per CPU (model/precompile.py): what makes a cold Engine() fast, and a new CPU
say what it is doing."""
import json
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch

import inferlab as il
from inferlab.model import engine_files, weights
from inferlab.model.loader import load_model_uncached


@pytest.fixture
def tiny_weights():
    return load_model_uncached("tiny").weights


def test_weights_round_trip_through_the_engine_file(tmp_path, tiny_weights):
    path = str(tmp_path / "w.safetensors")
    weights.save(tiny_weights, path)
    back = weights.load(path)
    assert back.tied == tiny_weights.tied and back.rope_scaling == tiny_weights.rope_scaling
    assert back.config.num_hidden_layers == tiny_weights.config.num_hidden_layers
    for (n, a), (m, b) in zip(tiny_weights.named(), back.named()):
        assert n == m and torch.equal(a, b)
    assert torch.equal(back.inv_freq, tiny_weights.inv_freq)


def test_a_transformers_model_on_the_same_memory_gives_the_same_logits(tiny_weights):
    original = load_model_uncached("tiny").hf_model
    rebuilt = weights.hf_model(tiny_weights)
    assert rebuilt.model.layers[0].self_attn.q_proj.weight.data_ptr() == \
        tiny_weights.layers[0].wqkv.data_ptr()                       # a view, not a copy
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        assert torch.allclose(original(ids).logits, rebuilt(ids).logits, atol=1e-6)


def _entry(tmp_path, w):
    entry = tmp_path / "entry"
    entry.mkdir()
    engine_files.save_weights(str(entry), w)
    return entry


def test_the_entry_file_loads_and_a_damaged_one_is_removed_with_a_warning(tmp_path,
                                                                        tiny_weights):
    entry = _entry(tmp_path, tiny_weights)
    manifest = json.loads((entry / engine_files.MANIFEST).read_text())
    assert set(manifest[engine_files.WEIGHTS]) == {"size", "sha256", "sampled"}
    # no background check here: under load it could run after the flip below, find it, and
    # remove the file before the load this test is about
    assert engine_files.load_weights(str(entry), verify_in_background=False) is not None
    assert engine_files.verify_all(str(entry)) is None
    f = entry / engine_files.WEIGHTS
    data = bytearray(f.read_bytes())
    data[-10] ^= 0xFF                                   # in the last sample: caught at once
    f.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="damaged"):
        assert engine_files.load_weights(str(entry)) is None
    assert not f.exists()                              # removed; the next start writes it again


def test_truncated_and_flipped_elsewhere(tmp_path, tiny_weights):
    entry = _entry(tmp_path, tiny_weights)
    f = entry / engine_files.WEIGHTS
    data = f.read_bytes()
    mid = engine_files.SAMPLE + 100                     # between samples: only the full check
    f.write_bytes(data[:mid] + bytes([data[mid] ^ 1]) + data[mid + 1:])
    assert engine_files.verify_all(str(entry)) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert engine_files.load_weights(str(entry), verify_in_background=False) is not None
    # ... but by the full check that follows every load on a background thread
    with pytest.warns(UserWarning, match="failed its full check"):
        assert engine_files.load_weights(str(entry)) is not None
        for t in threading.enumerate():
            if t.name == "inferlab-verify-weights":
                t.join()
    assert not f.exists()
    engine_files.save_weights(str(entry), tiny_weights)        # written again, whole
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])               # truncated: seen by its size
    with pytest.warns(UserWarning, match="size"):
        assert engine_files.load_weights(str(entry)) is None


def test_panels_are_kept_and_read_back(tmp_path, tiny_weights):
    import numpy as np
    entry = _entry(tmp_path, tiny_weights)
    panels = {"a": np.arange(64, dtype=np.float32).reshape(2, 1, 32)}
    engine_files.save_panels(str(entry), panels)
    back = engine_files.load_panels(str(entry))
    assert np.array_equal(back["a"], panels["a"])
    os.environ["INFERLAB_ENGINE_FILES"] = "0"
    try:
        assert engine_files.load_panels(str(entry)) == {}
        assert engine_files.load_weights(str(entry)) is None
    finally:
        del os.environ["INFERLAB_ENGINE_FILES"]


NEW_CPU = ("import sys\nimport inferlab as il\n"
           "e = il.Engine('tiny', num_blocks=160, block_size=16, dtype=sys.argv[1])\n"
           "e.generate([[5, 6, 7]] * 3 + [list(range(3, 600))], il.SamplingParams(max_tokens=4,"
           " ignore_eos=True), use_tqdm=False)\n")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", pytest.param("bfloat16", marks=pytest.mark.full(
    "tests/test_engine_files.py::"
    "test_a_new_cpu_says_it_compiles_once_then_every_kernel_is_cached[float32]"))])
def test_a_new_cpu_says_it_compiles_once_then_every_kernel_is_cached(tmp_path, dtype):
    """An empty numba cache stands for a CPU numba has not compiled for. The first Engine()
    says what it is doing; afterwards a run with prefill, batched decode and one-token steps
    compiles nothing more (NUMBA_DEBUG_CACHE lists no saved kernel) and says nothing. A
    bfloat16 engine compiles its own kernels (bf16 GEMM tiles, the decode pass over bf16
    weights) the same way."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    first = subprocess.run([sys.executable, "-c", NEW_CPU, dtype], env=env, capture_output=True,
                           text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    which = "" if dtype == "float32" else f" in {dtype}"
    assert f"compiling the engine's kernels{which} for this CPU, once" in first.stderr
    assert "kernels compiled in" in first.stderr
    assert list((tmp_path / "numba").rglob("inferlab-kernels-*.compiled"))
    again = subprocess.run([sys.executable, "-c", NEW_CPU, dtype], capture_output=True,
                           text=True, env={**env, "NUMBA_DEBUG_CACHE": "1"}, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "compiling" not in again.stderr
    saved = [line for line in again.stdout.splitlines() if "data saved" in line]
    assert saved == [], saved[:5]
