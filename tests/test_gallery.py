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
                      "ch02_tokenization.png"], images
    for name in images:
        png = (tmp_path / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000, name
    assert "## Views" in text and "## Chapter figures" in text
