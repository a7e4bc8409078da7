"""Bad input gets a clear error and the engine keeps serving; faults leave nothing behind."""
import subprocess
import sys

import pytest

import inferlab as il
from inferlab.errors import InferlabError

OK_PROMPT = [11, 12, 13, 14, 15]


@pytest.fixture(scope="module")
def eng():
    return il.Engine("tiny", num_blocks=32, block_size=4, max_model_len=64)


@pytest.fixture(scope="module")
def reference_tokens(eng):
    return eng.generate([OK_PROMPT], il.SamplingParams(max_tokens=6, ignore_eos=True),
                        use_tqdm=False)[0].token_ids


def still_serving(eng, reference_tokens):
    out = eng.generate([OK_PROMPT], il.SamplingParams(max_tokens=6, ignore_eos=True),
                       use_tqdm=False)[0]
    assert out.token_ids == reference_tokens
    st = eng.stats()
    assert st.kv_blocks_used == 0 and st.num_running == 0 and st.num_waiting == 0
    assert all(r == 0 for r in eng.kv.pool.ref_cnt)


BAD_PROMPTS = [
    ("", ValueError, "empty"),
    ([], ValueError, "empty"),
    (list(range(3, 100)), ValueError, "max_model_len"),           # longer than the context
    ([1, 2, "x"], TypeError, r"prompt\[2\]"),
    ([1, 2, 10**9], ValueError, "vocabulary"),
    (3.5, TypeError, "prompt must be"),
    ([{"role": "user"}], ValueError, "content"),
    ([{"role": "wizard", "content": "hi"}], ValueError, "role"),
    ([{"role": "user", "content": 5}], TypeError, "content"),
]


@pytest.mark.parametrize("prompt, exc, match", BAD_PROMPTS)
def test_bad_prompt_clear_error_then_serving(eng, reference_tokens, prompt, exc, match):
    with pytest.raises(exc, match=match) as e:
        eng.add_request(prompt, il.SamplingParams(max_tokens=4))
    assert isinstance(e.value, InferlabError)
    still_serving(eng, reference_tokens)


@pytest.mark.parametrize("layout", ["paged", "contiguous"])
def test_request_that_never_fits_is_rejected_at_add(layout):
    small = il.Engine("tiny", num_blocks=8, block_size=4, max_model_len=64, kv_layout=layout,
                      contiguous_reserve="request")       # the whole cache: 32 token slots
    with pytest.raises(il.CapacityError, match="whole cache"):
        small.add_request(list(range(3, 33)), il.SamplingParams(max_tokens=10))
    out = small.generate([OK_PROMPT], il.SamplingParams(max_tokens=6, ignore_eos=True),
                         use_tqdm=False)[0]
    assert len(out.token_ids) == 6 and small.stats().kv_blocks_used == 0


def test_bad_params_and_types(eng, reference_tokens):
    with pytest.raises(TypeError, match="SamplingParams"):
        eng.add_request(OK_PROMPT, {"max_tokens": 3})
    with pytest.raises(TypeError, match="prompts must be a list"):
        eng.generate(42)
    with pytest.raises(ValueError, match="one per prompt"):
        eng.generate([OK_PROMPT, OK_PROMPT], [il.SamplingParams()])
    # a bad prompt in the middle of a batch: nothing of the batch is left behind
    with pytest.raises(ValueError):
        eng.generate([OK_PROMPT, "", OK_PROMPT], use_tqdm=False)
    still_serving(eng, reference_tokens)


@pytest.mark.parametrize("kwargs, match", [
    (dict(scheduler="fifo"), "scheduler"), (dict(kv_layout="ring"), "kv_layout"),
    (dict(attention_backend="triton"), "attention_backend"), (dict(block_size=0), "block_size"),
    (dict(clock="TPU9000"), "GPU"), (dict(max_num_seqs=1.5), "max_num_seqs"),
    (dict(colour="red"), "unknown engine option"), (dict(dtype="int3"), "dtype"),
    (dict(device="tpu"), "device"),
])
def test_bad_engine_options(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match) as e:
        il.Engine("tiny", **kwargs)
    assert isinstance(e.value, InferlabError)


def test_model_errors_say_what_to_do(tmp_path):
    with pytest.raises(il.ModelLoadError, match="neither a local directory"):
        il.Engine(str(tmp_path / "nope"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00garbage" * 100)
    with pytest.raises(il.ModelLoadError, match="corrupt|truncated"):
        il.Engine(str(bad))
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(il.ModelLoadError, match="safetensors"):
        il.Engine(str(tmp_path / "pickled"))


def test_abort_mid_stream_frees_blocks(eng, reference_tokens):
    stream = eng.stream(list(range(20, 40)), il.SamplingParams(max_tokens=30, ignore_eos=True))
    for i, delta in enumerate(stream):
        if i == 3:
            assert eng.stats().kv_blocks_used > 0
            assert eng.abort(delta.request_id)
            break
    stream.close()
    still_serving(eng, reference_tokens)


def test_raising_hook_does_not_stop_the_run(eng, reference_tokens):
    seen = []

    def bad_hook(rec):
        raise RuntimeError("boom")

    eng.subscribe(bad_hook)
    unsubscribe = eng.subscribe(seen.append)
    with pytest.warns(RuntimeWarning, match="bad_hook"):
        still_serving(eng, reference_tokens)
    unsubscribe()
    assert seen and len(eng.bus) == 0


def test_keyboard_interrupt_leaves_engine_reusable(eng, reference_tokens, monkeypatch):
    real = eng.runner.execute
    calls = {"n": 0}

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(eng.runner, "execute", interrupted)
    with pytest.raises(KeyboardInterrupt):
        eng.generate([OK_PROMPT, list(range(30, 45))], il.SamplingParams(max_tokens=8),
                     use_tqdm=False)
    monkeypatch.setattr(eng.runner, "execute", real)
    still_serving(eng, reference_tokens)


def test_preemption_storm_still_correct():
    prompts = [list(range(10 + i, 25 + i)) for i in range(6)]
    sp = il.SamplingParams(max_tokens=10, ignore_eos=True)
    roomy = il.Engine("tiny", num_blocks=256, block_size=4).generate(prompts, sp, use_tqdm=False)
    tight = il.Engine("tiny", num_blocks=8, block_size=4, enable_prefix_caching=False)
    outs = tight.generate(prompts, sp, use_tqdm=False)
    assert [o.token_ids for o in outs] == [o.token_ids for o in roomy]
    assert tight.stats().num_preemptions > 0 and tight.stats().kv_blocks_used == 0
    assert sum(o.metrics.num_preemptions for o in outs) == tight.stats().num_preemptions


def test_no_network_at_run_time():
    code = """
import socket
def refuse(*a, **k):
    raise RuntimeError("network call attempted")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
import inferlab as il
eng = il.Engine("tiny", num_blocks=32)
out = eng.generate(["Hello world"], il.SamplingParams(max_tokens=4), use_tqdm=False)[0]
assert len(out.token_ids) == 4
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


def test_abort_all_clears_queued_future_and_running(eng, reference_tokens):
    sp = il.SamplingParams(max_tokens=20, ignore_eos=True)
    eng.add_request(list(range(40, 60)), sp)
    eng.add_request(list(range(60, 70)), sp)
    eng.add_request(OK_PROMPT, sp, arrival_time=eng.now + 1000.0)    # not arrived yet
    eng.step()
    assert eng.abort_all() == 3
    assert not eng.has_unfinished_requests()
    still_serving(eng, reference_tokens)
