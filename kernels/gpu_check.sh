#!/usr/bin/env bash
# GPU check for the numba-CUDA paged-attention kernels (issue 4), for a lent H200.
#
#   bash kernels/gpu_check.sh             # from the repository root; < 5 minutes
#   bash kernels/gpu_check.sh --dry-run   # no GPU: every step in numba's CUDA simulator at tiny
#                                         # shapes (CI runs this: tests/test_gpu_check.py)
#
# Uses only what the GPU machine has preinstalled (python, torch, numba-cuda; pytest if
# present): inferlab is NOT installed there, so a throwaway directory maps the package the way
# pyproject does (inferlab/ + kernels/ as inferlab.kernels) and goes on PYTHONPATH.
# Steps: 1) the CUDA kernel tests at real shapes if pytest is there, fp32, fp16 and bf16 (the
# CPU kernel tests are CI's: compiling them all on a fresh box would spend the lease); 2) python -m inferlab.bench.cuda_kernels: correctness at real shapes in
# fp32, fp16 and bf16 (half: within one output rounding of the fp32 reference), kernel-only
# decode bandwidth as % of 4.8 TB/s at batch 64 x context 2048/4096 for each dtype side by
# side, launch overhead, torch SDPA on gathered K/V; 3) engine tokens/s vs transformers;
# 4) python -m inferlab.bench.gpu_steps: the engine on an 8B-shaped (Llama-3-8B) random-weight
# model in bf16 (Engine("random:llama-3-8b")), a 512-token prefill and decode steps at batch 1
# and 32, beside transformers' forward on the same weights and the H200 profile's step_time.
# Steps 1, 2 and 4 first (what only a GPU can check), the tokens/s bench last. Time limits
# keep the whole run under 9.5 minutes (a lease is 15 minutes, the start included). Exit
# status: non-zero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python}
status=0
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
STEPS=${GPU_CHECK_STEPS:-1234}          # e.g. GPU_CHECK_STEPS=34: only steps 3 and 4 (a rerun)
want() { [[ $STEPS == *$1* ]]; }
SLOW=1                                  # the simulator runs each CUDA thread in Python: more time
if [ $DRY = 1 ]; then export NUMBA_ENABLE_CUDASIM=1; SLOW=3; fi

source "$ROOT/kernels/shim.sh"      # $SHIM: the package as pyproject maps it; cd there
# do not write caches into the tree (the dry run keeps the caller's numba cache: CI has
# compiled these kernels already, and a cold compile under load would only time it out)
[ $DRY = 1 ] || export NUMBA_CACHE_DIR="$SHIM/numba-cache"

echo "== environment"
if [ $DRY = 1 ]; then echo "dry run: numba's CUDA simulator, tiny shapes"; else
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv,noheader || status=1; fi
$PY -c "import torch, numba, numba.cuda as c; print('torch', torch.__version__, '| numba',
numba.__version__, '| cuda available:', c.is_available(), torch.cuda.is_available())" || status=1
$PY -c "import inferlab, inferlab.kernels; assert inferlab.kernels.__file__.startswith('$SHIM'), \
inferlab.kernels.__file__; print('inferlab from the shim:', inferlab.__file__)" || exit 1

if want 1; then
echo "== 1. kernel tests (real shapes on the GPU)"
if $PY -c "import pytest" 2>/dev/null; then
  # (dry run: two of them, to run this invocation through the shim; the test suite runs
  # the whole file in the simulator already: tests/test_kernels_cudasim.py)
  KSEL="not in_simulator and not import_is_cheap"
  [ $DRY = 1 ] && KSEL="$KSEL and ((test_decode and shape0) or write_kv or (decode_half and bfloat16))"
  timeout $((150 * SLOW)) $PY -m pytest -q -p no:cacheprovider -o addopts="" -x \
      tests/test_kernels_cudasim.py -k "$KSEL" || status=1
  # engine parity with transformers on the GPU (random tiny Llama; no model wheel needed)
  timeout 60 $PY -m pytest -q -p no:cacheprovider -o addopts="" tests/test_parity.py \
      -k "on_gpu" || status=1
else
  echo "pytest not installed here: step 2 still checks correctness at real shapes"
fi
fi

if want 2; then
echo "== 2. bench_cuda: correctness, bandwidth (fp32, fp16, bf16), launch overhead, SDPA"
timeout $((120 * SLOW)) $PY -m inferlab.bench.cuda_kernels --peak-tbs 4.8 || status=1
fi

if want 3; then
echo "== 3. engine steps of an 8B-shaped model in bf16 vs transformers and the H200 profile"
if [ $DRY = 1 ]; then   # a tiny shape on the CPU: every step of the script, numbers meaningless
  timeout 240 $PY -m inferlab.bench.gpu_steps --tiny --device cpu || status=1
else
  timeout 180 $PY -m inferlab.bench.gpu_steps --shape llama-3-8b --gpu H200 || status=1
fi
fi

if want 4; then
echo "== 4. engine tokens/s, random-weight SmolLM2-shaped model, batch 1 and 64"
# The SmolLM2 GGUF cannot travel to the GPU box: random weights of the same shape, token ids.
if [ $DRY = 1 ]; then   # the same command on the CPU, tiny: it must run, its numbers don't matter
  # (every path of the bench runs: both engines, padded, generate_batch, batch 1; few tokens)
  timeout 480 $PY -m inferlab.bench engine --device cpu --model tiny --requests 1 --repeats 1 \
      --input-len 16 --output-len 8 || status=1
else
  timeout 90 $PY -m inferlab.bench engine --device cuda --model tiny-smollm2 --requests 64 \
      --repeats 3 || status=1
fi
fi

echo "== gpu_check exit status: $status"
exit $status
