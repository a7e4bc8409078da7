"""The KV map's one drawing (inferlab.lab.drawings.kv_map, issue 26): waste hatched and
stated in the title, blocks as token slots, shared and cached blocks marked with legend
entries only when present, only the rows in use, requests told apart by labels (not
colours), one request's block table with its tokens' text, and the same trace structure
for any state (the live FigureWidget is updated in place)."""
import pytest

import inferlab as il
from inferlab.lab import palette
from inferlab.lab.drawings import kv_map as drawing
from inferlab.observe.trace import Trace
from inferlab.widgets import KVBlockMap

WASTE = "reserved, empty (wasted)"


def _run(layout, prompts, **kw):
    eng = il.Engine("tiny", kv_layout=layout, block_size=4, seed=0, **kw)
    tr = Trace.record(eng)
    eng.generate(prompts, il.SamplingParams(max_tokens=5, ignore_eos=True), use_tqdm=False)
    return eng, tr.stop()


@pytest.fixture(scope="module")
def contiguous():
    return _run("contiguous", [[5, 6, 7, 8, 9, 10], [11, 12, 13]], num_blocks=64,
                max_model_len=32)


@pytest.fixture(scope="module")
def shared():
    # two prompts share their first 8 tokens (2 blocks of 4): prefix caching shares them
    return _run("paged", [[5, 6, 7, 8, 9, 10, 11, 12, 13], [5, 6, 7, 8, 9, 10, 11, 12, 40]],
                num_blocks=256, enable_prefix_caching=True, max_num_seqs=4)


def _names(fig):
    return {tr.name for tr in fig.data if tr.showlegend}


def test_contiguous_waste_is_hatched_and_in_the_title(contiguous):
    eng, tr = contiguous
    kv = KVBlockMap(tr)
    kv.cursor = 0
    rec = tr.records[0]
    fig = kv.figure()
    waste = next(t for t in fig.data if t.name == WASTE)
    assert waste.marker.pattern.shape == "/"
    assert waste.marker.pattern.fgcolor == palette.CACHE["waste"]
    used = next(t for t in fig.data if t.name == "holds tokens")
    assert used.marker.color == palette.CACHE["used"]
    # waste drawn: far more hatched width than filled width, as the numbers say
    assert sum(waste.x) > 3 * sum(used.x)
    tokens, slots = rec.kv_tokens_used, rec.kv_slots_allocated
    assert slots == 2 * 32 and tokens == 6 + 3
    pct = round(100 * (1 - tokens / slots))
    # and in memory, at the engine's own bytes per token (K and V, every layer, its dtype)
    per = eng.runner.kv_bytes_per_token
    assert per == 2 * 4 * eng.model.num_layers * eng.model.num_kv_heads * eng.model.head_dim
    mem = f"{drawing.size((slots - tokens) * per)} of {drawing.size(slots * per)}"
    head, sub = fig.layout.title.text.split("<br>")
    assert f"{tokens} of {slots} reserved slots hold tokens ({pct}% wasted)" in head
    assert f"{drawing.size(per)} a token slot in float32: {mem} reserved is empty" in sub
    assert "contiguous" in fig.layout.title.text and "clock: wall" in fig.layout.title.text
    assert {"holds tokens", WASTE} <= _names(fig) <= {"holds tokens", WASTE, "free"}


def test_partial_block_and_requests_by_label(contiguous):
    _, tr = contiguous
    kv = KVBlockMap(tr)
    kv.cursor = 0
    fig = kv.figure()
    used = next(t for t in fig.data if t.name == "holds tokens")
    # each block's filled width is its share of the 4 slots: the last block's partial fill
    want = sorted(min(4, n - 4 * i) / 4 for n in tr.records[0].stored_tokens.values()
                  for i in range(-(-n // 4)))
    assert sorted(round(w / drawing.CELL, 3) for w in used.x) == want
    assert any(w < 1 for w in want)
    # no colour per request: every bar is a cache-state colour or see-through
    allowed = {*palette.CACHE.values(), "rgba(0,0,0,0)"}
    assert {t.marker.color for t in fig.data if t.type == "bar"} <= allowed
    labels = next(t for t in fig.data if t.name == "labels")
    assert sorted(labels.text) == sorted(drawing._short(sorted(rec_ids(tr))).values())


def rec_ids(tr):
    return list(tr.records[0].block_tables)


def test_only_rows_in_use_are_drawn(shared):
    _, tr = shared
    kv = KVBlockMap(tr)
    kv.cursor = 1
    fig = kv.figure()
    cols = drawing._columns(256, 4)
    used = max(b for t in tr.records[1].block_tables.values() for b in t)
    rows = used // cols + 1
    bars = [t for t in fig.data if t.type == "bar" and t.xaxis == "x"]
    assert max(y for t in bars for y in t.y) == rows - 1
    assert any("free, not drawn" in a.text for a in fig.layout.annotations)


def test_shared_and_cached_marked_only_when_present(shared):
    _, tr = shared
    kv = KVBlockMap(tr)
    k = next(i for i, r in enumerate(tr.records) if len(r.block_tables) == 2)
    kv.cursor = k
    fig = kv.figure()
    sh = next(t for t in fig.data if t.name == "shared (ref > 1)")
    assert len(sh.x) == 2 and sh.marker.color == palette.CACHE["shared"] and sh.showlegend
    assert "in the prefix cache" in _names(fig)
    assert WASTE in _names(fig)            # the last blocks' empty slots
    # the shared block is shared in both panels: purple on the map and in the block table,
    # and labelled with how many requests point at it
    table = [t for t in fig.data if t.name == "shared (ref > 1)" and t.xaxis == "x2"]
    assert len(table) == 1 and len(table[0].x) == 2 * 4      # two blocks of 4 slots
    labels = next(t for t in fig.data if t.name == "labels")
    assert "×2" in labels.text


def test_block_table_with_token_text(shared):
    eng, tr = shared
    kv = KVBlockMap(tr, tokenizer=eng.tokenizer)
    k = len(tr.records) - 2
    kv.cursor = k
    table = kv.block_table()
    rec = tr.records[k]
    assert table["blocks"] == rec.block_tables[table["request"]]
    assert table["tokens"] == rec.stored_tokens[table["request"]]
    emitted = [e.text for r in tr.records[:k + 1] for e in r.emitted
               if e.request_id == table["request"]]
    assert table["texts"][-len(emitted):] == emitted
    fig = kv.figure()
    assert table["request"] in fig.layout.annotations[1].text
    ticks = fig.layout.yaxis2.ticktext
    assert ticks[0] == f"0 → {table['blocks'][0]}"
    kv.selected = sorted(rec.block_tables)[-1]
    assert kv.block_table()["request"] == kv.selected


def test_prompt_text_needs_matching_tokenization():
    class Tok:
        def encode(self, text, **kw):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(chr(i) for i in ids)
    from inferlab.widgets.kv_map import _token_texts
    assert _token_texts(Tok(), "abc", 3) == ["a", "b", "c"]
    assert _token_texts(Tok(), "abc", 2) == [None, None]      # not how the engine split it
    assert _token_texts(None, "abc", 3) == [None] * 3


def test_same_structure_in_every_state(contiguous, shared):
    shapes = set()
    for _, tr in (contiguous, shared):
        kv = KVBlockMap(tr)
        for k in (0, len(tr.records) - 1):
            kv.cursor = k
            for dark in (False, True):
                fig = kv.figure(dark=dark)
                shapes.add(tuple((t.type, t.name, t.xaxis) for t in fig.data))
    empty = drawing.kv_map([], block_size=4)
    shapes.add(tuple((t.type, t.name, t.xaxis) for t in empty.data))
    assert len(shapes) == 1


def test_dark_theme(contiguous):
    _, tr = contiguous
    kv = KVBlockMap(tr)
    kv.cursor = 0
    fig = kv.figure(dark=True)
    assert fig.layout.template.layout.paper_bgcolor == palette.NEUTRAL["dark"]["bg"]
    # a label sits inside its block: on the fill in the fill's text colour, on a nearly
    # empty block (the contiguous reservation's tail) in the page's text colour
    labels = next(t for t in fig.data if t.name == "labels")
    assert labels.textfont.color and \
        set(labels.textfont.color) <= {palette.ON_FILL, palette.NEUTRAL["dark"]["fg"]}


def test_widget_shows_the_figure_in_place(shared):
    """The live FigureWidget (a child widget) equals view.figure() at every step, updated in
    place (the same FigureWidget), at most max_rate times a second."""
    import ipywidgets

    from inferlab.widgets import _plot
    from inferlab.widgets._base import wait_until
    _, tr = shared
    kv = KVBlockMap(tr)
    fw = kv.plot
    assert isinstance(fw, ipywidgets.DOMWidget) and kv.trait_metadata("plot", "sync")
    assert kv.get_state()["plot"] == "IPY_MODEL_" + fw.model_id
    for k in range(len(tr.records)):
        kv.cursor = k
        assert wait_until(lambda: not kv._redraw.pending(), timeout=5)
        assert _plot.same(kv.plot, kv.figure()), k
    assert kv.plot is fw                      # one FigureWidget, updated in place
    kv.dark = True
    assert wait_until(lambda: not kv._redraw.pending(), timeout=5)
    assert kv.plot.layout.template.layout.paper_bgcolor == palette.NEUTRAL["dark"]["bg"]
    assert _plot.same(kv.plot, kv.figure())
    # the throttle: 30 scrubs in a burst draw far fewer than 30 times
    n0 = kv._redraw.count
    for k in range(30):
        kv.cursor = k % len(tr.records)
    assert wait_until(lambda: not kv._redraw.pending(), timeout=5)
    assert kv._redraw.count - n0 < 30 and _plot.same(kv.plot, kv.figure())
    kv.close()


def test_a_bfloat16_cache_shows_half_the_bytes_a_slot():
    """The map's memory comes from the engine that ran: bf16 K/V take half of fp32's."""
    full, half = (_run("contiguous", [[5, 6, 7]], num_blocks=64, max_model_len=32, dtype=dt)
                  for dt in ("float32", "bfloat16"))
    per = [eng.runner.kv_bytes_per_token for eng, _ in (full, half)]
    assert per[1] * 2 == per[0]
    for (eng, tr), dt, p in zip((full, half), ("float32", "bfloat16"), per):
        kv = KVBlockMap(tr)
        kv.cursor = 0
        fig = kv.figure()
        assert f"{drawing.size(p)} a token slot in {dt}" in fig.layout.title.text
        assert tr.meta["kv_bytes_per_token"] == p
