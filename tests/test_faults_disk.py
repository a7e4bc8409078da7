"""Disk faults (issue 15): an unwritable path or a full disk while recording, saving a trace,
exporting a Chrome trace or a figure gives an OutputWriteError naming the path and keeps what
was written; nothing is written outside the paths given (or the weights cache).

Tests may run as root, for whom chmod 0o500 stops nothing: the ``unwritable`` fixture checks,
and falls back to a path under a regular file (ENOTDIR for everyone). A full disk is real
where it can be (/dev/full; a file size limit, RLIMIT_FSIZE, in a child process) and
simulated elsewhere (os.write raising ENOSPC after a budget of bytes).
"""
import errno
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import types
import warnings

import pytest

import inferlab as il
from inferlab.errors import OutputWriteError
from inferlab.lab import figures
from inferlab.observe import files, trace_writer
from inferlab.observe.trace import Trace
from inferlab.widgets import SchedulerTimeline

ROOT = pathlib.Path(__file__).resolve().parents[1]
SP = il.SamplingParams(max_tokens=8, ignore_eos=True)
PROMPTS = ["one two three", "four five", "six seven eight nine", "ten"]


@pytest.fixture(scope="module")
def eng():
    return il.Engine("tiny", num_blocks=48, block_size=4, max_num_seqs=4)


@pytest.fixture(scope="module")
def trace(eng):
    with Trace.record(eng) as tr:
        eng.generate(PROMPTS, SP, use_tqdm=False)
    return tr


@pytest.fixture
def unwritable(tmp_path):
    """A directory nobody may write in: chmod 0o500, or (as root, where that stops nothing)
    a regular file standing where the directory would be."""
    d = tmp_path / "read-only"
    d.mkdir()
    d.chmod(0o500)
    try:
        (d / ".probe").write_bytes(b"")
    except OSError:
        yield d
        d.chmod(0o700)
        return
    (d / ".probe").unlink()
    d.chmod(0o700)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    yield blocker


class FullDisk:
    """``os`` as seen by one module, whose ``write`` fills the disk after ``budget`` bytes:
    the write that crosses it is cut short (a partial line), the next raises ENOSPC."""

    def __init__(self, budget):
        self.budget = budget

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        if self.budget <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = min(len(data), self.budget)
        self.budget -= n
        return os.write(fd, bytes(data[:n]))


def says_path(err, path):
    return os.fspath(path) in str(err) and isinstance(err, OSError) and err.filename == \
        os.fspath(path)


# --- unwritable paths -----------------------------------------------------------------------
def test_an_unwritable_recording_path_fails_before_the_run(eng, unwritable):
    path = unwritable / "run.trace.jsonl"
    with pytest.raises(OutputWriteError) as ei:
        Trace.record(eng, path=path)
    assert says_path(ei.value, path) and "nothing was written" in str(ei.value)
    assert ei.value.errno in (errno.EACCES, errno.ENOTDIR, errno.EPERM, errno.EROFS)
    assert len(eng.bus) == 0 and not path.exists()          # the engine was not touched
    assert eng.generate(["still serving"], SP, use_tqdm=False)[0].finish_reason == "length"


def test_unwritable_saves_and_exports_name_the_path(trace, unwritable, monkeypatch):
    monkeypatch.setattr(figures, "to_image", lambda *a, **k: b"\x89PNG not really")
    view = SchedulerTimeline(trace)
    before = list(trace.records)
    for name, save in [("run.json", trace.save), ("run.trace.jsonl", trace.save),
                       ("run.chrome.json", trace.to_chrome_trace),
                       ("timeline.png", lambda p: figures.save(view.figure(), p))]:
        path = unwritable / name
        with pytest.raises(OutputWriteError) as ei:
            save(path)
        assert says_path(ei.value, path), (name, str(ei.value))
        assert not path.exists()
    assert trace.records == before                          # the trace is unchanged


# --- full disk --------------------------------------------------------------------------------
def test_a_full_disk_at_the_start_fails_before_the_run(eng):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with pytest.raises(OutputWriteError, match=r"'/dev/full': No space left on device "
                                               r"\(the disk is full"):
        Trace.record(eng, path="/dev/full")
    assert len(eng.bus) == 0


def test_a_disk_filling_up_mid_recording_keeps_the_file_and_the_run(eng, tmp_path,
                                                                    monkeypatch):
    path = tmp_path / "run.trace.jsonl"
    ref = Trace.record(eng)
    rec = Trace.record(eng, path=path, keep=3, flush_interval=0.0)   # every step flushed
    size = os.path.getsize(path)
    monkeypatch.setattr(trace_writer, "os", FullDisk(budget=3 * 2000))   # a few more lines
    with pytest.warns(RuntimeWarning, match="could not go on writing the recording to") as w:
        outs = eng.generate(PROMPTS, SP, use_tqdm=False)
    monkeypatch.undo()
    rec.stop()
    ref.stop()
    err = rec.write_error
    assert err is not None and err.errno == errno.ENOSPC and says_path(err, path)
    assert str(err) in str(w[0].message) and "the disk is full" in str(err)
    # the run went on, and the trace kept every step (the unwritten ones in memory)
    assert all(o.finish_reason == "length" for o in outs) and eng.stats().kv_blocks_used == 0
    assert rec.records == ref.records
    # the file holds the steps it says, and loads up to the last complete one
    kept = rec.writer.flushed_steps
    assert 0 < kept < len(ref) and f"keeps its first {kept} steps" in str(err)
    assert os.path.getsize(path) > size
    with pytest.warns(RuntimeWarning, match="did not stop cleanly"):
        back = Trace.load(path)
    assert back.records == ref.records[:kept]
    # and everything can still be saved somewhere else
    rec.save(tmp_path / "all.trace.jsonl")
    assert Trace.load(tmp_path / "all.trace.jsonl").records == ref.records


def test_a_save_on_a_full_disk_removes_its_partial_file(trace, tmp_path, monkeypatch):
    monkeypatch.setattr(files, "os", FullDisk(budget=1000))
    path = tmp_path / "run.json"
    with pytest.raises(OutputWriteError) as ei:
        trace.save(path)
    assert says_path(ei.value, path) and "incomplete file was removed" in str(ei.value)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(trace_writer, "os", FullDisk(budget=4000))
    path = tmp_path / "run.trace.jsonl"
    with pytest.raises(OutputWriteError, match="the file keeps its first") as ei:
        trace.save(path)
    monkeypatch.undo()
    with pytest.warns(RuntimeWarning, match="dropped"):
        back = Trace.load(path)
    assert len(back) and back.records == trace.records[:len(back)]


LIMITED = textwrap.dedent("""
    import json, resource, signal, sys, warnings
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)        # a write past the limit: EFBIG
    import inferlab as il
    from inferlab.observe.trace import Trace
    eng = il.Engine("tiny", num_blocks=48, block_size=4, max_num_seqs=4)
    resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with Trace.record(eng, path=sys.argv[1], flush_interval=0.0) as tr:
            outs = eng.generate(["a b c d e f"] * 6, il.SamplingParams(max_tokens=24,
                                ignore_eos=True), use_tqdm=False)
    print(json.dumps({"steps": len(tr), "kept": tr.writer.flushed_steps,
                      "error": str(tr.write_error), "errno": tr.write_error.errno,
                      "finished": sum(o.finish_reason == "length" for o in outs),
                      "warned": [str(x.message) for x in w]}))
""")


def test_a_real_file_size_limit_mid_recording(tmp_path):
    """The kernel refuses the write (RLIMIT_FSIZE), as a full disk would."""
    path = tmp_path / "limited.trace.jsonl"
    (tmp_path / "child.py").write_text(LIMITED)
    out = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["errno"] == errno.EFBIG and repr(str(path)) in r["error"] and r["finished"] == 6
    assert r["warned"] == [r["error"]] and 0 < r["kept"] < r["steps"]
    assert os.path.getsize(path) == 20_000                 # written up to the limit
    with pytest.warns(RuntimeWarning, match=r"last line incomplete \(\d+ bytes\) dropped"):
        back = Trace.load(path)
    assert len(back) == r["kept"]


# --- nothing written elsewhere -------------------------------------------------------------
AUDITED = textwrap.dedent("""
    import json, os, sys, sysconfig
    PKG = [os.path.join({root!r}, d) for d in ("inferlab", "widgets", "kernels")]
    STD = sysconfig.get_paths()["stdlib"]
    writes = []

    def who():
        f = sys._getframe(2)
        while f is not None:
            name = f.f_code.co_filename
            if not name.startswith(STD) and not name.startswith("<"):
                return "inferlab" if any(name.startswith(p) for p in PKG) else name
            f = f.f_back
        return "python"

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            if not isinstance(path, (str, bytes, os.PathLike)):
                return
            if not ((mode and any(c in mode for c in "wax+"))
                    or (flags and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))):
                return
        elif event in ("os.rename", "os.replace", "os.link", "os.symlink"):
            path = args[1]
        elif event in ("os.mkdir", "os.remove", "os.rmdir", "shutil.rmtree", "os.truncate",
                       "os.chmod", "os.utime"):
            path = args[0]
            if isinstance(path, int):
                return
        else:
            return
        writes.append((os.path.abspath(os.fsdecode(path)), who()))

    sys.addaudithook(hook)
    import inferlab as il
    from inferlab.lab import figures
    from inferlab.observe.trace import Trace
    from inferlab.widgets import KVBlockMap, SchedulerTimeline, TokenStream
    out = sys.argv[1]
    eng = il.Engine("tiny", num_blocks=32, block_size=4)
    views = [SchedulerTimeline(eng), KVBlockMap(eng), TokenStream(eng)]
    with Trace.record(eng, path=os.path.join(out, "run.trace.jsonl")) as tr:
        eng.generate(["hello", "world"], il.SamplingParams(max_tokens=4), use_tqdm=False)
    for v in views:
        v.close()
    tr.save(os.path.join(out, "run.json"))
    tr.to_chrome_trace(os.path.join(out, "run.chrome.json"))
    Trace.load(os.path.join(out, "run.trace.jsonl")).save(os.path.join(out, "copy.jsonl"))
    figures.to_image = lambda *a, **k: b"<svg/>"      # kaleido's browser: not ours to audit
    figures.save(views[0].figure(), os.path.join(out, "timeline.svg"))
    print(json.dumps(writes))
""")


def test_nothing_is_written_outside_the_paths_given(tmp_path):
    """Every file the library opens for writing (seen by a Python audit hook) is one the user
    named; the libraries under it write only to the temp dir (torch) and their compile caches
    (``__pycache__``). (A figure's image comes from kaleido's headless browser, which keeps
    its profile in a temp dir; that browser is left out here, the figure's file is not.)"""
    home, tmp, out, cwd = (tmp_path / d for d in ("home", "tmp", "out", "cwd"))
    for d in (home, tmp, out, cwd):
        d.mkdir()
    (tmp_path / "child.py").write_text(AUDITED.format(root=str(ROOT)))
    env = dict(os.environ, HOME=str(home), TMPDIR=str(tmp), XDG_CACHE_HOME=str(home / ".cache"),
               INFERLAB_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1")
    for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):   # set by torch in this process
        env.pop(k, None)
    res = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(out)], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    writes = json.loads(res.stdout.strip().splitlines()[-1])
    given = {str(out / n) for n in ("run.trace.jsonl", "run.json", "run.chrome.json",
                                    "copy.jsonl", "timeline.svg")}
    ours = {p for p, by in writes if by == "inferlab"}
    assert ours == given, sorted(ours - given)
    others = [(p, by) for p, by in writes if p not in given and not (
        p.startswith(str(tmp)) or "/__pycache__" in p or p == "/dev/null"
        or p.startswith(str(tmp_path / "cache")))]
    assert others == [], others
    assert sorted(os.listdir(out)) == sorted(os.path.basename(p) for p in given)
    assert os.listdir(cwd) == [] and os.listdir(home) == []
