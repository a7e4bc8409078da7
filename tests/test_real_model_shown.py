"""What users look at runs the real SmolLM2: the Lab's default, the tour and every chapter
that builds an engine, in their committed full runs (read from the outputs: the engine's
model name, which for a random-weight model says "random weights"), and in smoke runs (the
data every claim is judged on names its model)."""
from __future__ import annotations

import inspect
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
REAL = "SmolLM2-135M-Instruct"
RANDOM = ("random weights", "tiny model", "(tiny")
# the one place a random-weight model belongs in a chapter's output: 03-model-sizes' larger
# shapes, each named with its parameter count beside SmolLM2-135M's real weights
SIZES_CLAIM = re.compile(r"\(\d[\d,]*M\s+parameters,\s+random\s+weights\)")
# every notebook whose cells build an engine (09: kernels only; 10: the cost model; 11 reads
# the claims; 12: vLLM's own engine)
WITH_ENGINE = ("00_tour", "01_prompt_anatomy", "02_tokenization", "03_prefill_decode",
               "04_kv_cache", "05_batching", "06_chunked_prefill", "07_prefix_caching",
               "08_safety_streaming", "13_sampling_and_decode", "14_your_own_traffic")


def _outputs(name: str) -> str:
    nb = json.loads((ROOT / "notebooks" / f"{name}.ipynb").read_text(encoding="utf-8"))
    texts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            for mime, data in out.get("data", {}).items():
                if mime.startswith("text/"):
                    texts.append("".join(data))
    return "\n".join(texts)


@pytest.mark.parametrize("name", WITH_ENGINE)
def test_the_committed_full_run_used_smollm2(name):
    text = _outputs(name)
    assert "smoke mode" not in text, f"{name}: the committed outputs are a smoke run"
    assert REAL in text, f"{name}: no engine output names {REAL}"
    found = [w for w in RANDOM if w in SIZES_CLAIM.sub("", text)]
    assert not found, f"{name}: its outputs show a random-weight model ({found})"


def test_the_lab_starts_on_smollm2():
    from inferlab.widgets import Lab
    assert inspect.signature(Lab).parameters["model"].default is None    # None = SmolLM2
    from inferlab.widgets.lab import WORKLOADS
    assert next(iter(WORKLOADS)) == "chat requests"


def test_the_detector_sees_a_random_model(tmp_path):
    """The check above fails on a chapter run on the tiny model."""
    import inferlab as il
    from inferlab.lab.chapters import ch06_chunked_prefill as ch
    name = il.Engine("tiny", num_blocks=16).model_name
    assert any(w in name for w in RANDOM) and REAL not in name
    assert "random weights" in ch.summary({**_fake_ch06(), "model": name})


def _fake_ch06() -> dict:
    run = {"p99": 0.01, "max": 0.02, "long_ttft": [0.1], "p50": 0.005}
    return {"runs": {"unchunked": run, "chunked": run}, "clock": "wall",
            "sizes": {"chunk": 256}}
