"""The gallery: one command draws every view (from a real SmolLM2 run) and the chosen
chapters' figures into PNGs and a README.md page that shows each of them."""
import pathlib
import re

import pytest

from inferlab.tools import gallery

pytestmark = pytest.mark.slow


def test_gallery_draws_every_view_and_chapter(tmp_path):
    page = pathlib.Path(gallery.build(tmp_path, smoke=True, only=["ch02"]))
    text = page.read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert images == ["token_stream.png", "scheduler_timeline.png", "kv_map_paged.png",
                      "kv_map_contiguous.png", "batching_comparison.png",
                      "ch02_tokenization.png", "kv_paging.gif"], images
    for name in images[:-1]:
        for twin in (name, name.replace(".png", "-dark.png")):
            png = (tmp_path / twin).read_bytes()
            assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, twin
        stem = name[:-4]
        assert (tmp_path / f"{stem}.caption.md").read_text().strip()
        assert (tmp_path / f"{stem}.alt.txt").read_text().strip()
    assert (tmp_path / "kv_paging.gif").read_bytes()[:6] == b"GIF89a"
    assert (tmp_path / "kv_paging.mp4").stat().st_size > 10_000
    assert "## Views" in text and "## Chapter figures" in text and "step by step" in text


def test_some_chapters_redrawn_into_a_page_leave_the_others_alone(tmp_path):
    import json
    (tmp_path / "README.md").write_text("# Gallery\n\n![old alt](ch02_tokenization.png)\n"
                                        "![other](ch01_prompt_anatomy.png)\n")
    (tmp_path / gallery.FINGERPRINTS).write_text('{"ch01_prompt_anatomy": "x", '
                                                 '"ch02_tokenization": "y"}')
    gallery.build(tmp_path, only=["ch02"])          # from the records: no measuring
    text = (tmp_path / "README.md").read_text()
    alt = (tmp_path / "ch02_tokenization.alt.txt").read_text().strip()
    assert f"![{alt}](ch02_tokenization.png)" in text and "![other](ch01_prompt" in text
    prints = json.loads((tmp_path / gallery.FINGERPRINTS).read_text())
    assert prints["ch01_prompt_anatomy"] == "x" and len(prints["ch02_tokenization"]) == 64
    assert not (tmp_path / "token_stream.png").exists()           # no view redrawn
    (tmp_path / "README.md").write_text("# Gallery\n")
    with pytest.raises(FileNotFoundError, match="no entry for ch02_tokenization"):
        gallery.build(tmp_path, only=["ch02"])


def test_the_committed_gallery_is_what_the_records_draw():
    """Every picture in docs/gallery, drawn again from the committed records without
    measuring, is the same figure (data and layout) as the one committed."""
    import json
    want = json.loads((gallery.REPO_GALLERY / gallery.FINGERPRINTS).read_text())
    got = {stem: gallery.fingerprint(fig) for stem, _, fig in
           gallery.view_figures() + gallery.chapter_figures()}
    assert got == want
