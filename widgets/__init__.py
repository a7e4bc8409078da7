"""Live views of the engine (anywidget): each attaches to an engine or replays a Trace.

    from inferlab.widgets import TokenStream, SchedulerTimeline, KVBlockMap
    view = SchedulerTimeline(eng)      # live: updates at most 20x a second
    view = SchedulerTimeline(trace)    # replay with a time scrubber
    view.figure()                      # the same picture as a plotly figure
"""
from ._base import View
from .kv_map import KVBlockMap
from .timeline import SchedulerTimeline
from .token_stream import TokenStream

__all__ = ["View", "TokenStream", "SchedulerTimeline", "KVBlockMap", "BatchingComparison", "Lab"]


def __getattr__(name):
    if name == "BatchingComparison":
        from .comparison import BatchingComparison
        return BatchingComparison
    if name == "Lab":
        from .lab import Lab
        return Lab
    raise AttributeError(f"module 'inferlab.widgets' has no attribute {name!r}")
