"""OutputProcessor: a step's new tokens -> text deltas, stop strings, RequestOutputs.

The scheduler finishes requests on token ids (EOS, stop tokens, length); text-level stops
need the detokenized text, so they are found here and reported back to the engine.
"""
from __future__ import annotations

from .events import EmittedToken
from .outputs import RequestMetrics, RequestOutput
from .request import Request
from .textstream import TextState


class OutputProcessor:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._texts: dict[str, TextState] = {}

    def add(self, req: Request) -> None:
        self._texts[req.request_id] = TextState(self.tokenizer, req.params.stop)

    def drop(self, request_id: str) -> None:
        self._texts.pop(request_id, None)

    def new_token(self, req: Request, now: float) -> tuple[str, bool]:
        """Note the token's time and detokenize; returns (text released, hit a stop string)."""
        req.times.token_times.append(now)
        n = len(req.output_token_ids)    # stop strings count once min_tokens are out (vLLM)
        return self._texts[req.request_id].push(req.output_token_ids, final=req.finished,
                                                check_stop=n > req.params.min_tokens)

    def emitted(self, req: Request, delta: str) -> EmittedToken:
        n = len(req.output_token_ids)
        return EmittedToken(req.request_id, req.output_token_ids[-1], delta, n - 1)

    def output(self, req: Request, delta: str) -> RequestOutput:
        """The request's output after this step; a finished request's text state is dropped."""
        text = self._texts[req.request_id].text
        if req.finished:
            self.drop(req.request_id)
        return RequestOutput(req.request_id, req.prompt_text, req.prompt_token_ids,
                             list(req.output_token_ids), text, req.finished, req.finish_reason,
                             RequestMetrics.of(req), [req.output_token_ids[-1]], delta,
                             None if req.params.logprobs is None else list(req.output_logprobs))
