"""The cache of converted weights: keyed by content, written atomically, verified on every
read (a corrupt entry is removed and rebuilt with a warning), one converter at a time, and
bit-identical to converting the GGUF again (weights and greedy tokens)."""
import contextlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

from inferlab.model import hf_dir
from inferlab.model import weights_cache as wc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERLAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("INFERLAB_WEIGHTS_CACHE", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def source(tmp_path):
    """A stand-in for a GGUF file: the cache only hashes it; ``build`` does the converting."""
    p = tmp_path / "model.gguf"
    p.write_bytes(os.urandom(4096))
    return str(p)


def tiny_model(seed=0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


class Loads:
    """build/read callbacks for load_cached that count their calls."""

    def __init__(self):
        self.built = self.read_ = 0

    def build(self):
        self.built += 1
        return tiny_model(), None

    def read(self, entry):
        from transformers import AutoModelForCausalLM
        self.read_ += 1
        return AutoModelForCausalLM.from_pretrained(entry, local_files_only=True).eval(), None


def assert_same_weights(a, b):
    import torch
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k


def entry_of(cache_dir):
    (entry,) = [p for p in (cache_dir / "weights").iterdir() if p.is_dir()
                and not p.name.startswith(".")]
    return entry


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("INFERLAB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert wc.cache_root() == str(tmp_path / "xdg" / "inferlab")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert wc.cache_root() == str(tmp_path / "home" / ".cache" / "inferlab")
    monkeypatch.setenv("INFERLAB_CACHE_DIR", str(tmp_path / "mine"))
    assert wc.cache_root() == str(tmp_path / "mine")


def test_first_load_converts_then_reads_identical_weights(cache, source):
    loads = Loads()
    m1, _, e1 = wc.load_cached(source, "float32", loads.build, loads.read)
    assert e1 is None and loads.built == 1
    entry = entry_of(cache)
    names = sorted(os.listdir(entry))
    assert {"config.json", "model.safetensors", "generation_config.json",
            hf_dir.MANIFEST} <= set(names)
    m2, _, e2 = wc.load_cached(source, "float32", loads.build, loads.read)
    assert e2 == str(entry) and loads.built == 1 and loads.read_ == 1
    assert_same_weights(m1, m2)
    assert not [p for p in (cache / "weights").iterdir() if p.name.startswith(".tmp")]


def test_writer_sets_the_gguf_marker_aside_and_puts_it_back(tmp_path):
    """A GGUF-loaded model refuses save_pretrained until its quantizer is set aside."""
    model = tiny_model()
    marker, qconfig = object(), {"quant_method": "gguf"}
    model.hf_quantizer = marker
    model.config.quantization_config = qconfig
    hf_dir.write_hf_dir(model, None, str(tmp_path / "out"))
    assert model.hf_quantizer is marker and model.config.quantization_config is qconfig
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert "quantization_config" not in saved


def test_key_is_the_content_dtype_and_transformers_major(cache, source, tmp_path):
    import transformers
    name = wc.entry_name(source, "float32")
    assert name.endswith(f"-float32-tf{transformers.__version__.split('.')[0]}")
    copy = tmp_path / "elsewhere" / "model.gguf"
    copy.parent.mkdir()
    copy.write_bytes(open(source, "rb").read())
    assert wc.entry_name(str(copy), "float32") == name          # same bytes, same entry
    assert wc.entry_name(source, "bfloat16") != name
    with open(source, "ab") as f:
        f.write(b"x")
    assert wc.entry_name(source, "float32") != name             # new bytes: new entry


def test_file_hash_is_remembered_until_the_file_changes(cache, source, monkeypatch):
    digest = wc.file_sha256(source)
    monkeypatch.setattr(wc, "_sha256", lambda p: pytest.fail("re-hashed an unchanged file"))
    assert wc.file_sha256(source) == digest
    monkeypatch.undo()
    monkeypatch.setenv("INFERLAB_CACHE_DIR", str(cache))
    st = os.stat(source)
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    calls = []
    real = wc._sha256
    monkeypatch.setattr(wc, "_sha256", lambda p: calls.append(p) or real(p))
    assert wc.file_sha256(source) == digest and calls == [os.path.abspath(source)]


def test_disabled_converts_every_time_and_writes_nothing(cache, source, monkeypatch):
    monkeypatch.setenv("INFERLAB_WEIGHTS_CACHE", "0")
    loads = Loads()
    for _ in range(2):
        assert wc.load_cached(source, "float32", loads.build, loads.read)[2] is None
    assert loads.built == 2 and not cache.exists()


def _truncate(p):
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) // 2)


def _flip_a_byte(p):
    with open(p, "r+b") as f:
        f.seek(os.path.getsize(p) - 100)       # inside the tensor data, not the header
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0x01]))


@pytest.mark.parametrize("damage", [
    lambda e: _truncate(e / "model.safetensors"),
    lambda e: _flip_a_byte(e / "model.safetensors"),
    lambda e: (e / "config.json").write_text("{"),
    lambda e: (e / hf_dir.MANIFEST).unlink(),
    lambda e: (e / hf_dir.MANIFEST).write_text("not json"),
], ids=["truncated", "one-bit-flipped", "bad-config", "no-manifest", "bad-manifest"])
def test_corrupt_entry_is_never_used_but_removed_and_rebuilt(cache, source, damage):
    loads = Loads()
    original, _, _ = wc.load_cached(source, "float32", loads.build, loads.read)
    damage(entry_of(cache))
    with pytest.warns(wc.CacheWarning, match="corrupt"):
        model, _, entry = wc.load_cached(source, "float32", loads.build, loads.read)
    assert entry is None and loads.built == 2           # converted again, not read
    assert_same_weights(model, original)
    assert wc.verify(str(entry_of(cache))) is None      # the rebuilt entry is whole
    again, _, entry = wc.load_cached(source, "float32", loads.build, loads.read)
    assert entry is not None and loads.built == 2
    assert_same_weights(again, original)


def test_tokenizer_entry_checks_the_small_files_and_any_dtype(cache, source):
    assert wc.tokenizer_entry(source) is None                 # nothing converted yet
    wc.load_cached(source, "bfloat16", *(lambda l: (l.build, l.read))(Loads()))
    entry = entry_of(cache)
    assert wc.tokenizer_entry(source) == str(entry)           # a bfloat16 entry serves too
    _flip_a_byte(entry / "model.safetensors")                 # weights are not re-hashed
    assert wc.tokenizer_entry(source) == str(entry)
    (entry / "config.json").write_text("{")                   # the small files are
    assert wc.tokenizer_entry(source) is None


def test_rename_wins_the_loser_discards_its_copy(cache, tmp_path):
    final = str(tmp_path / "out" / "entry")
    assert hf_dir.write_dir_atomically(tiny_model(0), None, final) is True
    first = open(os.path.join(final, "model.safetensors"), "rb").read()
    assert hf_dir.write_dir_atomically(tiny_model(1), None, final) is False
    assert open(os.path.join(final, "model.safetensors"), "rb").read() == first
    assert os.listdir(tmp_path / "out") == ["entry"]          # no temp dir left behind
    assert wc.verify(final) is None


def test_unwritable_cache_warns_and_still_loads(tmp_path, source, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("INFERLAB_CACHE_DIR", str(blocker / "cache"))
    loads = Loads()
    with pytest.warns(wc.CacheWarning):
        model, _, entry = wc.load_cached(source, "float32", loads.build, loads.read)
    assert entry is None and model is not None


RACER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_weights_cache import Loads
    from inferlab.model import weights_cache as wc
    loads = Loads()
    build = loads.build
    def slow_build():
        time.sleep(3)            # hold the lock long enough for the other to arrive
        return build()
    loads.build = slow_build
    open(sys.argv[2], "w").close()
    while not all(__import__("os").path.exists(p) for p in sys.argv[2:4]):
        time.sleep(0.01)         # start together
    wc.load_cached(sys.argv[1], "float32", loads.build, loads.read)
    print("built" if loads.built else "read")
""")


def test_two_kernels_starting_at_once_convert_once(cache, source, tmp_path):
    script = tmp_path / "racer.py"
    script.write_text(RACER.format(tests=os.path.join(REPO, "tests")))
    flags = [str(tmp_path / "go-a"), str(tmp_path / "go-b")]
    env = {**os.environ, "INFERLAB_CACHE_DIR": str(cache)}
    procs = [subprocess.Popen([sys.executable, str(script), source, *flags[::step]],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for step in (1, -1)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert sorted(o[0].strip() for o in outs) == ["built", "read"]
    assert wc.verify(str(entry_of(cache))) is None


def test_info_clear_and_the_cli(cache, source):
    wc.load_cached(source, "float32", *(lambda l: (l.build, l.read))(Loads()))
    st = wc.info()
    assert st["root"] == str(cache) and len(st["entries"]) == 1
    assert st["entries"][0]["bytes"] > 0 and st["entries"][0]["source"] == source
    env = {**os.environ, "INFERLAB_CACHE_DIR": str(cache)}
    cli = [sys.executable, "-m", "inferlab.cli", "cache"]
    r = subprocess.run([*cli, "info"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "1 entries" in r.stdout and entry_of(cache).name in r.stdout
    r = subprocess.run([*cli, "clear"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "removed" in r.stdout
    assert wc.info()["entries"] == [] and not (cache / "weights").exists()
    assert wc.clear() == 0


def test_export_hf_writes_a_loadable_directory(tmp_path):
    import inferlab as il
    from inferlab.model.loader import export_hf
    out = str(tmp_path / "tiny-hf")
    r = subprocess.run([sys.executable, "-m", "inferlab.cli", "export-hf", out, "--model", "tiny"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "wrote" in r.stdout, r.stderr[-2000:]
    files = set(os.listdir(out))
    assert {"config.json", "model.safetensors", "tokenizer.json", hf_dir.MANIFEST} <= files
    assert wc.verify(out) is None
    sp = il.SamplingParams(max_tokens=8, ignore_eos=True)
    a = il.Engine("tiny").generate([[5, 6, 7, 8]], sp, use_tqdm=False)[0].token_ids
    b = il.Engine(out).generate([[5, 6, 7, 8]], sp, use_tqdm=False)[0].token_ids
    assert a == b
    with pytest.raises(il.ModelLoadError, match="not an empty directory"):
        export_hf("tiny", out)


@contextlib.contextmanager
def no_network():
    import socket

    def refuse(*a, **k):
        raise RuntimeError("network call attempted")
    with pytest.MonkeyPatch.context() as mp:
        for obj, name in ((socket.socket, "connect"), (socket, "create_connection"),
                          (socket, "getaddrinfo")):
            mp.setattr(obj, name, refuse)
        yield


@pytest.mark.full("tests/test_weights_cache.py::"
                   "test_first_load_converts_then_reads_identical_weights")
@pytest.mark.slow
def test_smollm2_from_the_cache_equals_the_gguf(cache):
    """Engine(model=None) twice in one process: the first converts the GGUF (and fills the
    cache), the second reads the cache. Same tensors bit for bit, same greedy tokens."""
    import inferlab as il
    from inferlab.model.loader import export_hf, load_model, smollm2_dir
    prompts = ["The capital of France is", [{"role": "user", "content": "Name three colours."}],
               "def fibonacci(n):"]
    sp = il.SamplingParams(max_tokens=24, ignore_eos=True)
    load_model.cache_clear()
    try:
        converted = il.Engine()
        assert converted.loaded.origin == "converted"
        assert converted.loaded.cache_path == str(entry_of(cache))     # written for next time
        out_a = converted.generate(prompts, sp, use_tqdm=False)
        load_model.cache_clear()
        with no_network():
            cached = il.Engine()                    # reading the cache stays offline
        # the engine's own file (memory-mapped, no transformers model built to start)
        assert cached.loaded.origin == "engine file"
        assert cached.loaded.cache_path == str(entry_of(cache))
        out_b = cached.generate(prompts, sp, use_tqdm=False)
        assert_same_weights(converted.loaded.hf_model, cached.loaded.hf_model)
        for a, b in zip(out_a, out_b):
            assert a.prompt_token_ids == b.prompt_token_ids     # same tokenizer + template
            assert a.token_ids == b.token_ids and a.text == b.text
        manifest = json.loads((entry_of(cache) / hf_dir.MANIFEST).read_text())
        assert manifest["dtype"] == "float32" and len(manifest["source_sha256"]) == 64
        # a damaged engine file: warned about, removed, the entry read through transformers,
        # the file written again for the next start; the same tokens
        from inferlab.model import engine_files
        engine_file = entry_of(cache) / engine_files.WEIGHTS
        engine_file.write_bytes(engine_file.read_bytes()[:4096])
        load_model.cache_clear()
        with pytest.warns(UserWarning, match="damaged"):
            again = il.Engine()
        assert again.loaded.origin == "cache" and engine_file.stat().st_size > 10 ** 8
        assert again.generate(prompts[:1], sp, use_tqdm=False)[0].token_ids == out_a[0].token_ids
        # a random-weight model borrows the tokenizer from the entry, not the GGUF's vocabulary
        from inferlab.model.loader import DEFAULT_GGUF, default_tokenizer, load_tokenizer
        tok, from_gguf = default_tokenizer(), load_tokenizer(smollm2_dir(), DEFAULT_GGUF)
        assert tok.name_or_path == str(entry_of(cache)) and tok is not from_gguf
        text = from_gguf.apply_chat_template(prompts[1], tokenize=False, add_generation_prompt=True)
        assert tok.encode(text) == from_gguf.encode(text) and len(tok) == len(from_gguf)
        # `inferlab export-hf` shares the writer: byte-identical files (bar the manifest)
        out = export_hf(None, str(cache.parent / "export"))
        exported = json.loads(open(os.path.join(out, hf_dir.MANIFEST)).read())
        assert exported["files"] == manifest["files"]
    finally:
        load_model.cache_clear()
