#!/usr/bin/env bash
# The two-minute GPU probe (issue 46): run it first whenever a GPU is lent.
#
#   bash kernels/gpu_probe.sh [OUT_DIR]            # on the GPU; OUT_DIR: $OUT, else ./gpu-probe-out
#   bash kernels/gpu_probe.sh --dry-run [OUT_DIR]  # numba's CUDA simulator, tiny sizes (CI:
#                                                  # tests/test_gpu_check.py)
#
# Three answers (python -m inferlab.bench.gpu_probe): host us per numba-CUDA launch as the
# engine launches today vs prepared once; a numba kernel captured in a torch CUDA graph and
# replayed with refilled inputs, checked against eager; bf16 loads of 16, 32 and 64 bits, GB/s.
# Each is written to OUT_DIR the moment it is known (<step>.json, probe.md), after the GPU's
# name and the versions (env.txt): a run cut short still returns what ran. Under 2 minutes,
# the compiles included; exit status non-zero if a step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python}
DRY=0
[ "${1:-}" = "--dry-run" ] && { DRY=1; shift; }
OUTDIR=$(realpath -m "${1:-${OUT:-gpu-probe-out}}")
mkdir -p "$OUTDIR"
[ $DRY = 1 ] && export NUMBA_ENABLE_CUDASIM=1
source "$ROOT/kernels/shim.sh"      # $SHIM: the package as pyproject maps it; cd there
[ $DRY = 1 ] || export NUMBA_CACHE_DIR="$SHIM/numba-cache"

{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  if [ $DRY = 1 ]; then echo "dry run: numba's CUDA simulator, tiny sizes"
  else nvidia-smi --query-gpu=name,memory.total,clocks.max.memory,driver_version \
         --format=csv,noheader; fi
  $PY -c "import torch, numba, numba.cuda as c; print('torch', torch.__version__, '| numba',
numba.__version__, '| numba-cuda sees a GPU:', c.is_available(), '| torch:',
torch.cuda.is_available())"
} 2>&1 | tee "$OUTDIR/env.txt"

# HBM bandwidth for the load step's share of the peak: from the GPU's name
PEAK=()
case "$(head -2 "$OUTDIR/env.txt" | tail -1)" in
  *H200*) PEAK=(--peak-gbs 4800) ;;
  *H100*PCIe*) PEAK=(--peak-gbs 2000) ;;
  *H100*) PEAK=(--peak-gbs 3350) ;;
esac
DRYARG=()
[ $DRY = 1 ] && DRYARG=(--dry-run)
timeout 110 $PY -m inferlab.bench.gpu_probe --out "$OUTDIR" "${PEAK[@]}" "${DRYARG[@]}"
status=$?
echo "== gpu_probe exit status: $status (results in $OUTDIR)"
exit $status
