# Sourced by kernels/gpu_check.sh and kernels/gpu_probe.sh (from the repository root, with
# ROOT set): the GPU machine has python, torch and numba-cuda but not inferlab, so a throwaway
# directory maps the package the way pyproject does (inferlab/ + kernels/ as inferlab.kernels)
# and goes first on PYTHONPATH; the caller ends up in it.
SHIM=$(mktemp -d)
trap 'rm -rf "$SHIM"' EXIT
mkdir -p "$SHIM/inferlab"
for f in "$ROOT"/inferlab/*; do ln -s "$f" "$SHIM/inferlab/"; done
ln -s "$ROOT/kernels" "$SHIM/inferlab/kernels"
[ -d "$ROOT/widgets" ] && ln -s "$ROOT/widgets" "$SHIM/inferlab/widgets"
ln -s "$ROOT/tests" "$SHIM/tests"
# numba-cuda 0.68.0 registers np.row_stack, which numpy 2.4 removed (the GPU box has both)
cat > "$SHIM/sitecustomize.py" <<'PY'
import numpy
if not hasattr(numpy, "row_stack"):
    numpy.row_stack = numpy.vstack
PY
export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
# run from the shim: `python -m` puts the working directory first on sys.path, and from the
# root that is the bare inferlab/ without its kernels (an editable install hides this)
cd "$SHIM"
