"""One home per fact: colours live in inferlab/lab/palette.py only, the KV block-state bits
in widgets/kv_map.py only; the widgets (JS, CSS) and their figures read them from there."""
import pathlib
import re

import numpy as np
import pytest

import inferlab as il
from inferlab.lab import figures, palette
from inferlab.observe.trace import Trace
from inferlab.widgets import KVBlockMap, SchedulerTimeline, TokenStream, View
from inferlab.widgets import kv_map as kv_mod

ROOT = pathlib.Path(__file__).resolve().parents[1]
# every meaning a colour can carry (issue 26): one hex value, one meaning
MEANINGS = {"PHASE": palette.PHASE, "POLICY": palette.POLICY, "CACHE": palette.CACHE,
            "VERDICT": palette.VERDICT}
HEX = re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b")
# JupyterLab theme colours keep their fallbacks: CSS var(--jp-x, #fff), JS ilVar(el, "--jp-x", "#fff")
THEME_FALLBACK = re.compile(r"""var\(--jp-[\w-]+,\s*#[0-9a-fA-F]{3,6}\)"""
                            r"""|["']--jp-[\w-]+["'],\s*["']#[0-9a-fA-F]{3,6}["']""")


def _sources():
    return sorted((ROOT / "widgets").glob("*.js")) + sorted((ROOT / "widgets").glob("*.css")) \
        + [ROOT / "inferlab" / "lab" / "figures.py"]


@pytest.fixture(scope="module")
def trace():
    eng = il.Engine("tiny", num_blocks=32, block_size=4, max_num_seqs=4)
    tr = Trace.record(eng)
    sp = il.SamplingParams(max_tokens=5, ignore_eos=True)
    eng.add_request([5, 6, 7, 8, 9, 10, 11, 12, 13], sp)
    eng.step()
    eng.add_request([5, 6, 7, 8, 9, 10, 11, 12, 40, 41], sp)
    while eng.has_unfinished_requests():
        eng.step()
    return tr.stop()


def test_sources_are_scanned():
    names = {p.name for p in _sources()}
    assert {"common.js", "kv_map.js", "timeline.js", "kv_map.css", "token_stream.css",
            "figures.py"} <= names


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.name)
def test_no_hex_colour_outside_palette(path):
    text = THEME_FALLBACK.sub("", path.read_text(encoding="utf-8"))
    hits = [(i + 1, line.strip()) for i, line in enumerate(text.splitlines())
            if HEX.search(line)]
    assert not hits, f"hex colours in {path.name} (put them in inferlab/lab/palette.py): {hits}"


def test_palette_values_are_colours():
    colours = [*palette.KIND.values()]
    colours += [c for n in palette.NEUTRAL.values() for c in n.values()]
    colours += [c for d in MEANINGS.values() for c in d.values()] + [*palette.SERIES.values()]
    assert all(re.fullmatch(r"#[0-9A-F]{6}", c) for c in colours), colours


def test_css_variables_reach_every_view():
    css = palette.css_variables()
    assert css.startswith(".il-view {")
    for k, c in palette.KIND.items():
        assert f"--il-kind-{k}: {c};" in css
    assert "--il-owner" not in css and "--il-kv" not in css    # no cycling request colours
    for cls in (SchedulerTimeline, KVBlockMap, TokenStream):
        assert issubclass(cls, View) and cls._css.startswith(css), cls
        assert cls()._css.startswith(css)
    # the views' root element carries the class the variables are set on
    for js in ("timeline.js", "kv_map.js", "token_stream.js", "comparison.js"):
        assert '"il-view ' in (ROOT / "widgets" / js).read_text(encoding="utf-8"), js


def test_figures_use_palette():
    assert figures.KIND_COLORS == palette.KIND
    # a trace given no colour is a neutral series, never a phase's or a policy's hue
    assert set(figures.PALETTE) <= set(palette.SERIES.values())
    import plotly.io as pio
    for name, key in (("inferlab", "light"), ("inferlab_dark", "dark")):
        lay = pio.templates[name].layout
        assert lay.paper_bgcolor == palette.NEUTRAL[key]["bg"]
        assert lay.font.color == palette.NEUTRAL[key]["fg"]
        assert lay.xaxis.gridcolor == palette.NEUTRAL[key]["grid"]


def test_timeline_figure_kind_colours(trace):
    fig = SchedulerTimeline(trace).figure()
    lanes = [tr for tr in fig.data if tr.type == "bar" and tr.orientation == "h"]
    assert {tr.name for tr in lanes} >= {"prefill", "decode"}
    for tr in lanes:
        assert tr.marker.color == palette.KIND[tr.name], tr.name
    strip = [tr for tr in fig.data if tr.type == "bar" and tr.orientation != "h"]
    assert {tr.marker.color for tr in strip} == {palette.KIND["prefill"], palette.KIND["decode"]}


def test_kv_figure_colours_mean_cache_states(trace):
    """Requests are told apart by labels, not colours: the map's colours are cache states."""
    kv = KVBlockMap(trace)
    k = next(i for i, r in enumerate(trace.records) if len(r.block_tables) == 2)
    kv.cursor = k
    fig = kv.figure()
    by_name = {tr.name: tr for tr in fig.data}
    assert by_name["holds tokens"].marker.color == palette.CACHE["used"]
    assert by_name["shared (ref > 1)"].marker.color == palette.CACHE["shared"]
    assert by_name["reserved, empty (wasted)"].marker.pattern.fgcolor == palette.CACHE["waste"]
    assert by_name["in the prefix cache"].marker.color == palette.CACHE["cached"]
    # a request's blocks carry its id; a shared block its reference count (no one owns it)
    labels = by_name["labels"].text
    assert len(set(labels)) == 2 and all(any(o.endswith(t) for o in kv.owners)
                                         or t.startswith("×") for t in labels)


def test_kv_flags_have_one_home(trace):
    assert kv_mod.FLAGS == {"cached": 1, "shared": 2, "reserved": 4}
    assert (kv_mod.CACHED, kv_mod.SHARED, kv_mod.RESERVED) == (1, 2, 4)
    kv = KVBlockMap(trace)
    assert kv.flags == kv_mod.FLAGS and kv.trait_metadata("flags", "sync")
    flags = np.frombuffer(kv.cell_flags, "u1")
    cells = kv.cells()
    for c, f in zip(cells, flags):
        assert c["flags"] == f
        assert [c[n] for n in kv_mod.FLAGS] == [bool(f & b) for b in kv_mod.FLAGS.values()]
    # the JS draws nothing itself (the figure is built in Python): it reads no flag bits
    js = (ROOT / "widgets" / "kv_map.js").read_text(encoding="utf-8")
    assert not re.search(r"&\s*\d", js) and "cell_flags" not in js


def _meaning_of(colours: dict) -> dict:
    """hex -> every (dict, key) that names it."""
    out: dict = {}
    for name, d in colours.items():
        for key, c in d.items():
            out.setdefault(c.upper(), []).append(f"{name}[{key!r}]")
    return out


def one_meaning_each(colours: dict, series: dict) -> list[str]:
    """What breaks "one colour, one meaning": a hex value named twice in ``colours`` (dict
    name -> {key: hex}), or a neutral series colour equal to one of them."""
    named = _meaning_of(colours)
    bad = [f"{c}: {', '.join(m)}" for c, m in named.items() if len(m) > 1]
    bad += [f"{c}: {key} is also {', '.join(named[c.upper()])}" for key, c in series.items()
            if c.upper() in named]
    return bad


def _series_colours() -> dict:
    out = {f"SERIES[{k!r}]": c for k, c in palette.SERIES.items()}
    for dark in (False, True):
        for n in range(1, 9):
            out.update({f"sequence({n}, dark={dark})[{i}]": c
                        for i, c in enumerate(palette.sequence(n, dark))})
    return out


def test_one_hex_one_meaning():
    assert one_meaning_each(MEANINGS, _series_colours()) == []
    # the check itself catches both kinds of clash
    assert one_meaning_each({**MEANINGS, "X": {"again": palette.PHASE["prefill"]}}, {})
    assert one_meaning_each(MEANINGS, {"tokens": palette.POLICY["static"].lower()})


def test_verdict_colours_are_the_verdicts_by_name():
    from inferlab.lab import report
    from inferlab.lab.verdicts import STANDINGS
    assert list(palette.VERDICT) == list(STANDINGS)
    assert report.VERDICT_COLORS == palette.VERDICT


def _contrast(a: str, b: str) -> float:
    def lum(h):
        c = [int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        c = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_greys_read_on_both_pages(theme):
    """The queued grey and the neutral series stand off a white page and a dark one."""
    bg = palette.NEUTRAL[theme]["bg"]
    for name, c in {"queued": palette.PHASE["queued"], "main": palette.SERIES["main"],
                    "baseline": palette.SERIES["baseline"]}.items():
        assert _contrast(c, bg) >= 2.4, (name, c, theme)
    ramp = palette.sequence(5, dark=theme == "dark")
    assert all(_contrast(c, bg) >= 2.2 for c in ramp), ramp
    # the ramp runs away from the page: its last step stands out most
    assert _contrast(ramp[-1], bg) > _contrast(ramp[0], bg)


# the hues themselves (palette.BLUE, ...): a figure takes a meaning (PHASE["prefill"],
# SERIES["main"]), never a hue; the neutrals (INK, MUTED, MUTED_TEXT, ON_FILL) are text and
# guides
NEUTRALS = {"INK", "MUTED", "MUTED_TEXT", "ON_FILL"}
HUES = sorted(n for n, v in vars(palette).items() if n.isupper() and isinstance(v, str)
              and HEX.fullmatch(v) and n not in NEUTRALS)
# the canvas views' colours (owners, kinds, KV legend) and the colorway, by position
LEGACY = r"palette\.(?:OWNER|KIND|KV|owner)\b|PALETTE\s*\["


def raw_hues(text: str) -> list[str]:
    """Uses of a raw hue, of a canvas view's colours or of the colorway by position."""
    pat = re.compile(r"palette\.(?:" + "|".join(HUES) + r")\b|" + LEGACY)
    return [m.group(0) for m in pat.finditer(text)] + HEX.findall(text)


def _figure_modules():
    return sorted((ROOT / "inferlab" / "lab" / "chapters").glob("*.py")) + [
        ROOT / "inferlab" / "lab" / "report.py",
        ROOT / "inferlab" / "bench" / "clock_validation.py"]


def test_hues_are_known():
    assert {"BLUE", "ORANGE", "SKY_BLUE", "VERMILLION"} <= set(HUES)
    assert raw_hues("c = palette.ORANGE; d = ilf.PALETTE[2]; e = '#E69F00'") == [
        "palette.ORANGE", "PALETTE[", "#E69F00"]
    assert raw_hues('palette.PHASE["prefill"], palette.SERIES["main"], palette.INK') == []


@pytest.mark.parametrize("path", _figure_modules(), ids=lambda p: p.name)
def test_figures_take_colours_by_meaning(path):
    hits = [(i + 1, h) for i, line in enumerate(path.read_text(encoding="utf-8").splitlines())
            for h in raw_hues(line)]
    assert not hits, (f"{path.name} uses raw hues; take a meaning (palette.PHASE[...], "
                      f"POLICY, CACHE, VERDICT, SERIES, sequence): {hits}")


# --- one meaning per colour, told apart at a glance (issue 42) -------------------------------
# Machado, Oliveira and Fernandes (2009), severity 1.0: linear-RGB matrices simulating the
# three dichromacies (what a reader without one cone type sees)
CVD = {"protan": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
                  (-0.003882, -0.048116, 1.051998)),
       "deutan": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                  (-0.011820, 0.042940, 0.968881)),
       "tritan": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602),
                  (0.004733, 0.691367, 0.303900))}
CVD_GAP = 10.0       # within a family, two meanings stay this far apart for every reader


def simulate(color: str, kind: str) -> str:
    h = color.lstrip("#")
    lin = [(c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4)
           for c in (int(h[i:i + 2], 16) / 255 for i in (0, 2, 4))]
    out = [min(1.0, max(0.0, sum(m * v for m, v in zip(row, lin)))) for row in CVD[kind]]
    srgb = [12.92 * v if v <= 0.0031308 else 1.055 * v ** (1 / 2.4) - 0.055 for v in out]
    return "#" + "".join(f"{round(v * 255):02X}" for v in srgb)


def _hues():
    return [(fam, k, c) for fam, d in palette.FAMILIES.items() for k, c in d.items()
            if not palette.is_grey(c)]


def test_lab_matches_published_values():
    # CIE L*a*b* of sRGB primaries (D65), as colour-science tables give them
    for hexc, ref in (("#FF0000", (53.24, 80.09, 67.20)), ("#0000FF", (32.30, 79.19, -107.86)),
                      ("#FFFFFF", (100.0, 0.0, 0.0))):
        assert all(abs(a - b) < 0.3 for a, b in zip(palette.lab(hexc), ref)), hexc


def test_families_are_told_apart():
    """No hue of one family within FAMILY_GAP (CIE76) of a hue of another, nor of a grey:
    decode's green is not "holds"' green, continuous' pink is no model part."""
    hues = _hues()
    greys = {c for d in palette.FAMILIES.values() for c in d.values() if palette.is_grey(c)}
    greys |= {*palette.SERIES.values(), palette.INK, palette.MUTED, palette.MUTED_TEXT}
    close = [(a[:2], b[:2], round(palette.distance(a[2], b[2]), 1))
             for i, a in enumerate(hues) for b in hues[i + 1:]
             if a[0] != b[0] and palette.distance(a[2], b[2]) < palette.FAMILY_GAP]
    close += [(a[:2], g, round(palette.distance(a[2], g), 1)) for a in hues for g in greys
              if palette.distance(a[2], g) < palette.FAMILY_GAP]
    assert not close, close


def test_the_gap_check_can_fail():
    """The check above catches the clash issue 42 found: the old "holds" green beside decode."""
    assert palette.distance("#117733", palette.PHASE["decode"]) < palette.FAMILY_GAP
    assert palette.family_of(palette.PHASE["decode"]) == ("phase", "decode")
    assert palette.family_of("#117733") is None and palette.is_grey(palette.SERIES["main"])


@pytest.mark.parametrize("kind", sorted(CVD))
def test_each_family_survives_colour_blindness(kind):
    """Inside a family every two meanings stay apart for a reader with a dichromacy, on the
    white page and the dark one (the page itself: no hue vanishes into it)."""
    bad = []
    for fam, d in palette.FAMILIES.items():
        items = [(k, simulate(c, kind)) for k, c in d.items()]
        bad += [(fam, a, b, round(palette.distance(ca, cb), 1))
                for i, (a, ca) in enumerate(items) for b, cb in items[i + 1:]
                if palette.distance(ca, cb) < CVD_GAP]
        for theme in ("light", "dark"):
            page = palette.NEUTRAL[theme]["bg"]
            seen = [(k, simulate(c if theme == "light" else palette.on_dark(c), kind))
                    for k, c in d.items()]
            bad += [(fam, k, theme, round(palette.distance(c, page), 1)) for k, c in seen
                    if palette.distance(c, page) < CVD_GAP and c.upper() != page]
    assert not bad, bad
