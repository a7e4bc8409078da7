"""The OpenAI wire format out: completion bodies, streamed chunks (SSE) and usage counts.

One :class:`Answer` per HTTP request gathers the engine's per-step outputs of its choices.
Streaming, ``chunks`` turns each output into the chunk a client reads (text deltas; a chat
stream opens each choice with the assistant role and ends it with its finish reason);
otherwise ``body`` gives the whole response at the end. Usage counts a prompt once, however
many choices it has (as OpenAI does): prompt tokens as the engine tokenized the prompt
(chat messages with the model's template), completion tokens as it generated them.
"""
from __future__ import annotations

import json
import time
import uuid

FINISH = {"stop": "stop", "length": "length"}


def sse(data) -> str:
    """One server-sent event carrying ``data`` (a dict as JSON, or a string such as [DONE])."""
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


class Answer:
    def __init__(self, kind: str, model: str, num_choices: int, n: int):
        assert kind in ("completion", "chat")
        self.kind, self.model, self.n = kind, model, n
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.texts = [""] * num_choices
        self.finish: list[str | None] = [None] * num_choices
        self.completion_tokens = [0] * num_choices
        self.prompt_tokens: dict[int, int] = {}      # per distinct prompt
        self.opened = [False] * num_choices

    def add(self, index: int, out) -> None:
        self.texts[index] = out.text
        self.completion_tokens[index] = len(out.token_ids)
        self.prompt_tokens[index // self.n] = len(out.prompt_token_ids)
        if out.finished:
            self.finish[index] = FINISH.get(out.finish_reason, out.finish_reason)

    def usage(self) -> dict:
        p, c = sum(self.prompt_tokens.values()), sum(self.completion_tokens)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _head(self, chunk: bool) -> dict:
        obj = {"completion": "text_completion",
               "chat": "chat.completion.chunk" if chunk else "chat.completion"}[self.kind]
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    # --- streaming ---------------------------------------------------------------------
    def chunks(self, index: int, out) -> list[dict]:
        """The chunks one output delta makes (none for an empty, unfinished delta)."""
        self.add(index, out)
        finish = self.finish[index]
        res = []
        if self.kind == "chat":
            if not self.opened[index]:
                self.opened[index] = True
                res.append(self._chat_chunk(index, {"role": "assistant", "content": ""}, None))
            if out.new_text:
                res.append(self._chat_chunk(index, {"content": out.new_text}, None))
            if finish is not None:
                res.append(self._chat_chunk(index, {}, finish))
        elif out.new_text or finish is not None:
            res.append({**self._head(True), "choices": [
                {"index": index, "text": out.new_text, "logprobs": None,
                 "finish_reason": finish}]})
        return res

    def _chat_chunk(self, index: int, delta: dict, finish) -> dict:
        return {**self._head(True), "choices": [
            {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    def usage_chunk(self) -> dict:
        return {**self._head(True), "choices": [], "usage": self.usage()}

    # --- not streaming -----------------------------------------------------------------
    def body(self) -> dict:
        if self.kind == "chat":
            choices = [{"index": i, "message": {"role": "assistant", "content": t},
                        "logprobs": None, "finish_reason": f}
                       for i, (t, f) in enumerate(zip(self.texts, self.finish))]
        else:
            choices = [{"index": i, "text": t, "logprobs": None, "finish_reason": f}
                       for i, (t, f) in enumerate(zip(self.texts, self.finish))]
        return {**self._head(False), "choices": choices, "usage": self.usage()}
