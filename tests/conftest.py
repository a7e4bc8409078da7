import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Kernels, JupyterLab and chromium share these CPUs with the test process: OpenMP threads that
# spin while they wait make every one of them 5-30x slower (docs/results/omp-wait-amd.txt).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct, loaded once (engines share the cached weights)."""
    from inferlab.model.loader import load_model
    return load_model(None)


@pytest.fixture
def tiny_engine():
    import inferlab as il
    return il.Engine("tiny", num_blocks=64, block_size=4)


@pytest.fixture(scope="session")
def claims_smoke():
    """`inferlab claims --smoke`, in process, measured once per test session: test_claims judges
    it, and the chapter content tests read their chapter's measurement from it (each chapter's
    ``measure_for_claims(smoke=True)``) instead of measuring the same thing again."""
    from inferlab.lab import claims
    return claims.run_all(smoke=True)

