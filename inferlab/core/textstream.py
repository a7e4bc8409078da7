"""Incremental detokenization with stop strings.

Text is released to the stream only when it can no longer change: an incomplete UTF-8
character (shown by the tokenizer as U+FFFD) or a tail that might be the start of a stop
string is held back until the next token decides. So the streamed deltas always add up to
the final text, and the final text is cut exactly before the first stop string.
"""
from __future__ import annotations


class TextState:
    def __init__(self, tokenizer, stop: list[str]):
        self.tokenizer = tokenizer
        self.stop = list(stop or [])
        self.text = ""            # released so far

    def _decode(self, ids) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, output_ids: list[int], final: bool = False,
             check_stop: bool = True) -> tuple[str, bool]:
        """Decode the output so far; return (newly released text, hit a stop string).

        ``check_stop=False`` (before ``min_tokens``): stop strings are not looked for yet, but
        a tail that may start one is still held back, so a match that ends later is cut."""
        full = self._decode(output_ids)
        hits = [i for s in self.stop if check_stop
                and (i := full.find(s, max(0, len(self.text) - len(s) + 1))) != -1]
        stopped = bool(hits)
        if stopped:
            full = full[:min(hits)]
        if not (stopped or final):
            full = self._releasable(full)
        if not full.startswith(self.text):   # a held-back char resolved differently
            full = self.text + full[len(self.text):]
        delta = full[len(self.text):]
        self.text = full
        return delta, stopped

    def _releasable(self, full: str) -> str:
        end = len(full)
        while end > len(self.text) and full[end - 1] == "\ufffd":
            end -= 1
        for s in self.stop:   # hold back a tail that could still grow into a stop string
            for k in range(min(len(s) - 1, end - len(self.text)), 0, -1):
                if full[end - k:end] == s[:k]:
                    end -= k
                    break
        return full[:end]
