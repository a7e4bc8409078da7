"""Chapter 2: the same message costs more tokens in some languages than in others.

A tokenizer learns its vocabulary from its training text. SmolLM2's is mostly English, so an
English sentence packs into few tokens while the same sentence in Hindi or Thai falls apart
into many short pieces. Every token is paid for twice: once in prefill compute, and again as
KV cache memory for as long as the conversation lives.
"""
from __future__ import annotations

from .. import measure_cache, palette, protocol
from ..verdicts import AFTER, COUNTS, ENTER, Claim, Verdict, clock_note, direction, ms, x
from . import _kit
from ._ch02_tokenizers import (EXTRA_TEXTS, judge_tokenizers, measure_tokenizers,  # noqa: F401
                               smollm2, tokenizers_figure, tokenizers_summary)

TITLE = "Tokenization: the same message, different bills"
CLAIM = ("Tokenization cost is uneven across languages: text in scripts the tokenizer saw "
         "less of becomes more tokens, so it costs more prefill time and more KV memory.")

# One short message, translated (the meaning is kept, not the word order).
TEXTS = {
    "English": "The weather is lovely today, so we will walk to the market and buy fresh "
               "bread and some apples.",
    "French": "Il fait très beau aujourd'hui, alors nous irons à pied au marché acheter du "
              "pain frais et quelques pommes.",
    "German": "Heute ist das Wetter herrlich, also gehen wir zu Fuß zum Markt und kaufen "
              "frisches Brot und ein paar Äpfel.",
    "Spanish": "Hoy hace un tiempo precioso, así que iremos andando al mercado a comprar pan "
               "fresco y algunas manzanas.",
    "Russian": "Сегодня прекрасная погода, поэтому мы пойдём пешком на рынок и купим свежий "
               "хлеб и немного яблок.",
    "Greek": "Ο καιρός είναι υπέροχος σήμερα, οπότε θα περπατήσουμε μέχρι την αγορά και θα "
             "αγοράσουμε φρέσκο ψωμί και μερικά μήλα.",
    "Arabic": "الطقس جميل اليوم، لذلك سنمشي إلى السوق ونشتري خبزًا طازجًا وبعض التفاح.",
    "Hindi": "आज मौसम बहुत सुहावना है, इसलिए हम पैदल बाज़ार जाएँगे और ताज़ी रोटी और कुछ सेब "
             "खरीदेंगे।",
    "Chinese": "今天天气很好，所以我们要步行去市场买新鲜的面包和一些苹果。",
    "Japanese": "今日はとても良い天気なので、市場まで歩いて行って焼きたてのパンとりんごを少し買います。",
    "Korean": "오늘은 날씨가 정말 좋아서 시장까지 걸어가서 신선한 빵과 사과 몇 개를 살 거예요.",
    "Thai": "วันนี้อากาศดีมาก เราจึงจะเดินไปตลาดเพื่อซื้อขนมปังสดและแอปเปิ้ลสักสองสามลูก",
}
# A document of this many copies of the message: long enough that prefill is not all
# fixed overhead, short enough to fit the context window in every language.
REPEAT, REPEAT_SMOKE = 12, 8


def count(tok, text: str) -> int:
    return len(tok.encode(text, add_special_tokens=False))


def pieces(tok, text: str) -> list[str]:
    """How the tokenizer cuts ``text`` (each piece decoded on its own)."""
    return [tok.decode([i]) for i in tok.encode(text, add_special_tokens=False)]


@measure_cache.shared
def measure(smoke: bool = False, deterministic: bool = False, texts: dict | None = None,
            tokenizers=None) -> dict:
    """Each language's message through SmolLM2's tokenizer (``texts``: {language: text},
    default the chapter's), its prefill priced on the simulated H100 and, unless
    ``deterministic``, timed on this machine; the same messages, code and numbers
    (``EXTRA_TEXTS``) under each installed tokenizer (``tokenizers``: say SmolLM2's twice,
    to remove that claim's effect)."""
    import inferlab as il
    from inferlab.core.shapes import kv_bytes_per_token, model_shape
    _kit.seed_everything(0)
    tok = _kit.tokenizer()
    repeat = REPEAT_SMOKE if smoke else REPEAT
    texts = texts or TEXTS
    langs = list(texts) if not smoke else [k for k in ("English", "French", "Russian", "Hindi",
                                                       "Chinese", "Thai") if k in texts]
    kv_here = kv_bytes_per_token(model_shape("smollm2-135m"), 4)
    kv_8b = kv_bytes_per_token(model_shape("llama-3-8b"), 2)
    sim = _kit.engine(None, enable_prefix_caching=False, **_kit.SIM)
    one = il.SamplingParams(max_tokens=1, ignore_eos=True)
    rows, docs = [], []
    for lang in langs:
        text = texts[lang]
        ids = tok.encode(" ".join([text] * repeat), add_special_tokens=False)
        docs.append(ids)
        row = {"language": lang, "chars": len(text), "tokens": count(tok, text),
               "doc_tokens": len(ids),
               "prefill_sim": sim.generate([ids], one, use_tqdm=False)[0].metrics.ttft,
               "kv_bytes_here": len(ids) * kv_here, "kv_bytes_8b": len(ids) * kv_8b}
        row["tokens_per_char"] = row["tokens"] / row["chars"]
        rows.append(row)
    names = {"model": sim.model_name, "model_wall": None}
    del sim     # one engine's KV cache at a time (a 2 GB Binder pod)
    if not deterministic:
        wall = _kit.engine(None, enable_prefix_caching=False)
        _kit.warm_up(wall)
        for row, ids in zip(rows, docs):
            row["prefill_wall"] = wall.generate([ids], one, use_tqdm=False)[0].metrics.ttft
        names["model_wall"] = wall.model_name
        del wall
    base = next(r for r in rows if r["language"] == "English")
    for r in rows:
        r["vs_english"] = r["tokens"] / base["tokens"]
    both = {**{lang: texts[lang] for lang in langs}, **EXTRA_TEXTS}
    return {"rows": rows, "repeat": repeat, "clock_sim": _kit.SIM_LABEL, **names,
            "tokenizers": measure_tokenizers(both, repeat, tokenizers)}


def figure(data: dict):
    """Tokens for the same message in each language, and what they cost: the prefill of a
    document of copies on the simulated H100 and that document's KV cache for an 8B model."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots
    rows = sorted(data["rows"], key=lambda r: r["tokens"])
    names = [r["language"] for r in rows]
    fig = make_subplots(rows=1, cols=3, shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=("tokens (labels: vs English)",
                                        f"prefill of {data['repeat']} copies (ms)",
                                        "their KV cache (MiB, 8B model)"))
    fig.add_trace(go.Bar(y=names, x=[r["tokens"] for r in rows], orientation="h",
                         marker_color=palette.SERIES["main"], name="tokens",
                         text=[f"{r['vs_english']:.1f}x" for r in rows]), 1, 1)
    fig.add_trace(go.Bar(y=names, x=[r["prefill_sim"] * 1e3 for r in rows], orientation="h",
                         marker_color=palette.PHASE["prefill"], name="prefill, simulated H100"),
                  1, 2)
    fig.add_trace(go.Bar(y=names, x=[r["kv_bytes_8b"] / 2**20 for r in rows],
                         orientation="h", marker_color=palette.CACHE["used"], name="KV bytes"),
                  1, 3)
    fig.update_traces(showlegend=False)
    fig.update_yaxes(ticks="", row=1, col=2)
    fig.update_yaxes(ticks="", row=1, col=3)
    top = rows[-1]
    title = (f"The same message in {len(rows)} languages: {top['language']} takes "
             f"{top['vs_english']:.1f}x English's tokens, and its prefill and KV cache grow with them"
             f"<br><sup>tokens: {data['model']}'s tokenizer</sup>")
    fig = _kit.style(fig, title, data["clock_sim"], left=80)
    # no legend (each panel's title names its bars): no band kept for one under the plot
    return fig.update_layout(margin=dict(t=125, b=40))


def summary(data: dict) -> str:
    rows = sorted(data["rows"], key=lambda r: r["tokens"])
    lines = [f"{'language':9} {'chars':>5} {'tokens':>6} {'tok/char':>8} {'vs English':>10} "
             f"{'prefill (sim)':>13}" + ("  prefill (wall)" if "prefill_wall" in rows[0] else "")]
    for r in rows:
        lines.append(f"{r['language']:9} {r['chars']:5d} {r['tokens']:6d} "
                     f"{r['tokens_per_char']:8.2f} {r['vs_english']:9.1f}x "
                     f"{r['prefill_sim'] * 1e3:10.1f} ms"
                     + (f"  {r['prefill_wall'] * 1e3:10.0f} ms" if "prefill_wall" in r else ""))
    lines.append(f"model: {data['model']}; prefill (sim): {protocol.label(data['clock_sim'])}")
    return "\n".join(lines)


# --- the chapter's claims: how each is measured and judged --------------------------------------
def measure_for_claims(smoke: bool) -> dict:
    """The measurement every claim below is judged on (``claims.run_all``)."""
    return measure(smoke=smoke, deterministic=True)


def judge_languages(d: dict) -> Verdict:
    rows = sorted(d["rows"], key=lambda r: r["vs_english"])
    en = next(r for r in rows if r["language"] == "English")
    hi, mid = rows[-1], rows[len(rows) // 2]
    v = direction(hi["vs_english"], clear=2)
    mib = lambda r: f"{r['kv_bytes_8b'] / 2**20:.1f} MiB"
    return Verdict(v, f"{hi['language']} needs {x(hi['vs_english'])} English's tokens for the "
                   f"same message ({hi['tokens']} vs {en['tokens']}), {mid['language']} "
                   f"{x(mid['vs_english'])} (token counts, SmolLM2's tokenizer); projection "
                   f"{clock_note(d['clock_sim'])}: prefill of {d['repeat']} copies "
                   f"{ms(hi['prefill_sim'])} vs {ms(en['prefill_sim'])}, their KV cache "
                   f"{mib(hi)} vs {mib(en)} for an 8B model",
                   measured=f"up to {x(hi['vs_english'])} the tokens",
                   points=tuple((r["language"], r["tokens"]) for r in rows),
                   unit="tokens for the same message", clock=COUNTS)


CLAIMS = (
    Claim("02-languages", "The same message costs more tokens in some languages than in "
          "others, and so more prefill time and KV memory.", ENTER, "ch02_tokenization",
          measure_for_claims, judge_languages),
    Claim("02-tokenizers", "Different models use different tokenizers, so the same text is a "
          "different number of tokens, and so a different prefill and KV bill, on each.",
          f"{AFTER} (citing NVIDIA)", "ch02_tokenization", measure_for_claims,
          judge_tokenizers),
)
