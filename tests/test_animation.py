"""The KV cache animated from the real allocator (issue 42): frames from a trace's step
records, blocks freed by finished requests taken again by later ones, a shared prefix block,
GIF (Pillow) and MP4 (imageio-ffmpeg) with one frame per step, a strip of frames, and two
exports of one trace pixel-identical."""
import pytest

import inferlab as il
from inferlab.lab import animation
from inferlab.observe.trace import Trace

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trace():
    # four prompts behind one 8-token prefix (two blocks of 4), two seats: the later requests
    # take the blocks the first ones free, and all point at the shared prefix blocks
    eng = il.Engine("tiny", block_size=4, num_blocks=24, max_num_seqs=2, seed=0,
                    enable_prefix_caching=True)
    prefix = [5, 6, 7, 8, 9, 10, 11, 12]
    with Trace.record(eng) as tr:
        eng.generate([prefix + [20 + i] for i in range(4)],
                     [il.SamplingParams(max_tokens=n, ignore_eos=True) for n in (2, 6, 3, 5)],
                     use_tqdm=False)
    return tr


def test_the_run_pages(trace):
    rid = animation.follow(trace)
    tables = [r.block_tables[rid] for r in trace.records if rid in r.block_tables]
    assert any(t != list(range(t[0], t[0] + len(t))) for t in tables), tables
    assert any(len({b for t in r.block_tables.values() for b in t[:2]}) < 2 * len(
        r.block_tables) for r in trace.records if len(r.block_tables) > 1)  # shared prefix
    notes = [animation.step_note(r) for r in trace.records]
    assert any("frees" in n for n in notes) and any("admitted" in n for n in notes)


# ~20 s (two exports, every frame): full tier
@pytest.mark.full("tests/test_animation.py::test_the_run_pages")
def test_export_is_deterministic_and_complete(trace, tmp_path):
    from PIL import Image, ImageChops
    a = animation.export(trace, tmp_path / "a", every=1)
    b = animation.export(trace, tmp_path / "b", every=1)
    assert [p.rsplit(".", 1)[-1] for p in a] == ["gif", "mp4", "png", "svg", "md"]
    ga, gb = Image.open(tmp_path / "a.gif"), Image.open(tmp_path / "b.gif")
    assert ga.n_frames == gb.n_frames == len(trace.records)
    for k in range(ga.n_frames):
        ga.seek(k), gb.seek(k)
        diff = ImageChops.difference(ga.convert("RGB"), gb.convert("RGB"))
        assert diff.getbbox() is None, f"frame {k} differs"
    assert ga.size == (800, animation.FRAME_HEIGHT)
    import imageio_ffmpeg
    reader = imageio_ffmpeg.read_frames(str(tmp_path / "a.mp4"))
    meta = next(reader)
    assert meta["size"] == (1600, 2 * animation.FRAME_HEIGHT)
    assert sum(1 for _ in reader) == len(trace.records)
    strip = Image.open(tmp_path / "a-strip.png")
    assert strip.size == (3 * 800, 2 * animation.FRAME_HEIGHT)
    assert (tmp_path / "a-strip.svg").read_text().count("<svg") == 1 + 6
    assert "Source" not in (tmp_path / "a.caption.md").read_text()


def test_a_trace_without_steps_is_refused():
    from inferlab.errors import InvalidInputError
    eng = il.Engine("tiny", block_size=4, num_blocks=8)
    with Trace.record(eng) as tr:
        pass
    with pytest.raises(InvalidInputError, match="no steps"):
        animation.figures(tr)
