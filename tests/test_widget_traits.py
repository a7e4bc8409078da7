"""No view redefines a trait that ipywidgets' DOMWidget owns (issue 12, item 8).

KVBlockMap once synced its KV layout ("paged") as ``layout``: that name is every DOMWidget's
Layout model, so the front end handed the string to ``setLayout`` and the widget manager
threw "Cannot read properties of undefined (reading 'then')" from ``create_child_view`` for
every KV map on the page (two in the tour). The browser test (test_browser_notebooks.py)
catches the console error; this one names the trait without a browser.
"""
import inspect

import ipywidgets as w

import inferlab.widgets as W
from inferlab.widgets._base import View


def views():
    return [c for c in vars(W).values() if inspect.isclass(c) and issubclass(c, View)]


def test_no_view_shadows_a_domwidget_trait():
    base = set(w.DOMWidget.class_trait_names())
    shadowed = {}
    for cls in views():
        own = {n for k in cls.__mro__ if isinstance(k, type) and issubclass(k, View)
               for n in vars(k) if n in cls.class_trait_names()}
        if own & base:
            shadowed[cls.__name__] = sorted(own & base)
    assert len(views()) >= 4
    assert not shadowed, f"views redefine DOMWidget traits (rename them): {shadowed}"


def test_kv_map_layout_is_a_layout_model():
    kv = W.KVBlockMap()
    assert isinstance(kv.layout, w.Layout) and kv.kv_layout == "paged"
