"""Live views of the engine (anywidget): each attaches to an engine or replays a Trace.

    from inferlab.widgets import TokenStream, SchedulerTimeline, KVBlockMap
    view = SchedulerTimeline(eng)      # live: updates at most 20x a second
    view = SchedulerTimeline(trace)    # replay with a time scrubber
    view.figure()                      # the same picture as a plotly figure
"""
from inferlab.widgets._base import View
from inferlab.widgets.kv_map import KVBlockMap
from inferlab.widgets.timeline import SchedulerTimeline
from inferlab.widgets.token_stream import TokenStream

__all__ = ["View", "TokenStream", "SchedulerTimeline", "KVBlockMap", "BatchingComparison", "Lab",
           "VllmPrefixCache", "SweepView"]


def __getattr__(name):
    if name == "BatchingComparison":
        from inferlab.widgets.comparison import BatchingComparison
        return BatchingComparison
    if name == "VllmPrefixCache":
        from inferlab.widgets.vllm_kv import VllmPrefixCache
        return VllmPrefixCache
    if name == "SweepView":
        from inferlab.widgets.sweep_view import SweepView
        return SweepView
    if name == "Lab":
        from inferlab.widgets.lab import Lab
        return Lab
    raise AttributeError(f"module 'inferlab.widgets' has no attribute {name!r}")
