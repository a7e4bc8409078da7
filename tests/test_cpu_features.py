"""How half precision runs on this CPU (model/cpu_features.py), with each path forced.

oneDNN picks its bf16 kernels from the CPU (AMX, AVX512-BF16, or widened to fp32), and
``ONEDNN_MAX_CPU_ISA`` caps it: each cap is run in a process of its own (oneDNN reads it once),
and what the engine's plan says is checked against what oneDNN itself reports it ran
(``ONEDNN_VERBOSE``), and the logits against the float32 engine on the same weights."""
import json
import os
import subprocess
import sys

import pytest

from inferlab.kernels.gemm_cpu import bf16_dot_available
from inferlab.model.cpu_features import cpu_flags, half_path

NATIVE = {"amx": "amx", "avx512-bf16": "avx512_core_bf16"}    # plan -> oneDNN's kernel name

SCRIPT = r"""
import json, os, torch, inferlab as il
ids = list(range(40, 90))
f32 = il.Engine("tiny", num_blocks=16)
bf16 = il.Engine("tiny", num_blocks=16, dtype="bfloat16",
                 linear_backend=os.environ.get("LINEAR", "auto"))
ref = f32.runner.prompt_logits(ids)
ours = bf16.runner.prompt_logits(ids).float()
print("RESULT " + json.dumps({
    "precision": bf16.runner.plan.precision, "linear": bf16.runner.linear_backend,
    "attention": bf16.runner.backend, "kv_dtype": str(bf16.runner.k_cache.dtype),
    "err": (ours - ref).abs().max().item(), "scale": ref.abs().max().item(),
    "tokens": bf16.generate([ids], il.SamplingParams(max_tokens=4), use_tqdm=False)[0].token_ids}))
"""


def run_capped(cap, linear="onednn-packed", **more):
    """The script with oneDNN capped at ``cap`` and the bf16 engine on ``linear`` (oneDNN's,
    unless it cannot run: then auto's choice)."""
    env = {**os.environ, "ONEDNN_VERBOSE": "1", "LINEAR": linear, **more}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if cap:
        env["ONEDNN_MAX_CPU_ISA"] = cap
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    result = json.loads(next(x for x in lines if x.startswith("RESULT "))[7:])
    ran = [x for x in lines if x.startswith("onednn_verbose") and ",exec," in x and "bf16" in x]
    return result, ran


@pytest.mark.parametrize("cap, expect", [
    (None, half_path("bfloat16", cap="")),       # this CPU's best: amx or avx512-bf16 here
    ("AVX512_CORE", "converted"),
    ("AVX2", "aten")])
def test_each_bf16_path_is_what_onednn_runs_and_stays_correct(cap, expect):
    if cap is None and expect not in NATIVE:
        pytest.fail(f"this CPU has no bf16 instructions ({expect}); these machines all do")
    res, ran = run_capped(cap, "onednn-packed" if expect != "aten" else "auto")
    if expect == "aten" and bf16_dot_available():     # auto: the numba bf16 GEMM runs them
        expect = "numba"
    assert res["precision"] == f"bfloat16 ({'avx512-bf16' if expect == 'numba' else expect})"
    assert res["kv_dtype"] == "torch.bfloat16"
    if expect in NATIVE:
        assert res["linear"].startswith("onednn")
        assert any(NATIVE[expect] in x for x in ran), ran[:5]
    elif expect == "converted":
        assert res["linear"].startswith("onednn") and ran
        assert not any("amx" in x or "avx512_core_bf16" in x for x in ran), ran[:5]
    else:             # oneDNN cannot: the numba bf16 GEMM where the CPU has it, else torch's
        assert res["linear"] == ("numba" if expect == "numba" else "torch")
        assert not any("matmul" in x or "inner_product" in x for x in ran), ran[:5]
    # bf16 keeps 8 bits of mantissa: logits within a few percent of the float32 engine's
    assert res["err"] < 0.05 * max(res["scale"], 1.0), res
    assert len(res["tokens"]) == 4


def test_half_path_reads_flags_and_the_cap():
    amx = frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    zen4 = frozenset({"avx512f", "avx512_bf16"})
    assert half_path("bfloat16", amx, "", True) == "amx"
    assert half_path("bfloat16", amx, "AVX512_CORE_BF16", True) == "avx512-bf16"
    assert half_path("bfloat16", zen4, "", True) == "avx512-bf16"
    assert half_path("bfloat16", zen4, "AVX512_CORE", True) == "converted"
    assert half_path("bfloat16", zen4, "avx10_1_512", True) == "avx512-bf16"   # alias, any case
    assert half_path("bfloat16", zen4, "", False) == "aten"
    assert half_path("float16", zen4, "", True) == "converted"
    assert half_path("float16", frozenset({"avx512_fp16"}), "", True) == "avx512-fp16"
    assert half_path("float32") == "float32"
    with pytest.raises(ValueError, match="half-precision"):
        half_path("int8", zen4, "", True)
    assert "avx512f" in cpu_flags() or "avx2" in cpu_flags()


@pytest.mark.full("tests/test_cpu_features.py::"
                   "test_each_bf16_path_is_what_onednn_runs_and_stays_correct")
def test_without_avx512_bf16_for_numba_auto_takes_onednn_or_torch():
    """numba compiling for this CPU minus AVX512-BF16 (NUMBA_CPU_FEATURES, numba's own switch)
    is a CPU the numba bf16 GEMM cannot run on: auto falls back to oneDNN (measured: nothing
    to measure against), and with oneDNN capped too (AVX2), to torch; tokens still come."""
    import llvmlite.binding as llvm
    features = llvm.get_host_cpu_features()
    features["avx512bf16"] = False
    no_bf16 = {"NUMBA_CPU_FEATURES": features.flatten()}
    for cap, expect in ((None, "onednn-packed"), ("AVX2", "torch")):
        res, _ = run_capped(cap, "auto", **no_bf16)
        assert res["linear"] == expect, res
        assert res["err"] < 0.05 * max(res["scale"], 1.0), res
        assert len(res["tokens"]) == 4


def test_the_numba_bf16_gemm_runs_without_onednn():
    """Forced onto the numba bf16 GEMM (vdpbf16ps), the engine stays within bf16's rounding
    of the float32 one and never calls oneDNN's matmul."""
    if not bf16_dot_available():
        pytest.skip("this CPU has no AVX512-BF16: the numba bf16 GEMM cannot run")
    res, ran = run_capped(None, "numba")
    assert res["linear"] == "numba" and res["precision"] == "bfloat16 (avx512-bf16)"
    assert not any("matmul" in x or "inner_product" in x for x in ran), ran[:5]
    assert res["err"] < 0.05 * max(res["scale"], 1.0), res
