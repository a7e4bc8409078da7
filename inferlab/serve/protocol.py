"""The OpenAI wire format in: request bodies (pydantic models), validated with clear errors.

A body is parsed and validated in one go (``parse``): malformed JSON, a wrong type or an
out-of-range value becomes an :class:`APIError` whose ``body()`` is OpenAI's
``{"error": {"message", "type", "param", "code"}}``, with the field's path as ``param``.
A valid request becomes what the engine takes: one prompt and one ``SamplingParams`` per
choice (``engine_inputs``).

Tools (chat): ``tools`` and ``tool_choice`` "none" or "auto" are accepted, and the tools are
rendered into the prompt as the model's chat template renders them (``apply_chat_template(
tools=...)``), or, when the template ignores tools (SmolLM2's does), as a system message
listing them (``inferlab.core.prompts.render_messages``). A conversation may carry the
assistant's ``tool_calls`` and ``role: "tool"`` results, as an agent loop sends them back.
The server does not parse tool calls out of the model's text: SmolLM2-135M does not write
them reliably, so a response carries no ``tool_calls`` and its finish_reason stays "stop" or
"length". A forced choice ("required", or a named function) is refused with a 400: nothing
here can make the model call a tool.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..core.params import SamplingParams
from ..errors import InferlabError
from .errors import APIError, engine_error

MAX_N = 16                              # choices per request (each is one engine request)
SEED_MIN, SEED_MAX = -(2 ** 63), 2 ** 63 - 1 - MAX_N    # torch generator seeds, + choice index


# fields accepted at their neutral values only: what an OpenAI client may send by default
NEUTRAL = {"frequency_penalty": (0.0,), "presence_penalty": (0.0,), "repetition_penalty": (1.0,),
           "logit_bias": (None, {}), "logprobs": (None, False, 0), "top_logprobs": (None, 0),
           "best_of": (None, 1), "echo": (False,), "suffix": (None,), "tools": (None, []),
           "response_format": (None, {"type": "text"})}
TOOL_CHOICES = ("none", "auto")          # what a model that may or may not call tools allows


class _Body(BaseModel):
    # strict: "5" is not 5 and true is not 1; unknown fields are ignored (as vLLM does)
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Body):
    include_usage: bool = False


class _Sampling(_Body):
    """The fields both endpoints share (OpenAI's, then vLLM's extensions its clients send)."""

    model: str
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0)               # OpenAI's default
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=MAX_N)
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    top_k: int = Field(0, ge=-1)                          # vLLM: -1 or 0 = off
    min_tokens: int = Field(0, ge=0)
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    # NEUTRAL values only
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[str, float] | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    best_of: int | None = None
    echo: bool = False
    suffix: str | None = None
    tools: list | None = None
    response_format: dict | None = None

    @field_validator("max_tokens", "n", "seed", "top_k", "min_tokens", "stop_token_ids",
                     "logprobs", "top_logprobs", "best_of", mode="before")
    @classmethod
    def _integral(cls, v):
        return integral(v)

    def check(self) -> None:
        for name, neutral in self.neutral().items():
            if getattr(self, name) not in neutral:
                raise APIError(400, f"{name} is not supported by inferlab's engine (leave it "
                               f"out, or set it to {neutral[0]!r})", param=name,
                               code="unsupported_parameter")
        if self.stream_options is not None and not self.stream:
            raise APIError(400, "stream_options can only be set when stream is true",
                           param="stream_options")

    def params(self, max_tokens: int, num_prompts: int) -> list[SamplingParams]:
        """One SamplingParams per choice: prompt-major, n choices each; a seed counts up
        along the choices so that n seeded choices differ and repeat."""
        try:
            return [SamplingParams(
                max_tokens=max_tokens, temperature=self.temperature, top_p=self.top_p,
                top_k=max(self.top_k, 0), seed=None if self.seed is None else self.seed + j,
                stop=self.stop, ignore_eos=self.ignore_eos,
                stop_token_ids=list(self.stop_token_ids or []),
                min_tokens=min(self.min_tokens, max_tokens))
                for _ in range(num_prompts) for j in range(self.n)]
        except InferlabError as e:
            raise engine_error(e) from None

    @classmethod
    def neutral(cls) -> dict:
        return NEUTRAL

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]

    @field_validator("prompt", mode="before")
    @classmethod
    def _integral_ids(cls, v):
        return integral(v)

    def prompts(self) -> list:
        """The distinct prompts (OpenAI allows a batch: a list of strings or of id lists)."""
        p = self.prompt
        if isinstance(p, list) and p and isinstance(p[0], (str, list)):
            return list(p)
        return [p]

    def engine_inputs(self, max_model_len: int) -> tuple[list, list[SamplingParams]]:
        self.check()
        prompts = self.prompts()
        if not prompts or any(len(p) == 0 for p in prompts):
            raise APIError(400, "prompt is empty; give at least one character or token",
                           param="prompt")
        params = self.params(self.max_tokens or 16, len(prompts))   # OpenAI's default: 16
        return [p for p in prompts for _ in range(self.n)], params


class TextPart(_Body):
    type: Literal["text"]
    text: str


class FunctionCall(_Body):
    name: str
    arguments: str                       # JSON text, as the OpenAI API sends it


class ToolCall(_Body):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None    # None: an assistant's tool calls only
    name: str | None = None
    tool_calls: list[ToolCall] | None = None       # assistant: the calls it made
    tool_call_id: str | None = None                # tool: the call this result answers

    def as_dict(self, i: int) -> dict:
        c = self.content
        if self.tool_calls and self.role != "assistant":
            raise APIError(400, f"messages.{i}.tool_calls: only an assistant message can "
                           f"carry tool calls (this one's role is {self.role!r})",
                           param=f"messages.{i}.tool_calls", code="invalid_value")
        if c is None and not self.tool_calls:
            raise APIError(400, f"messages.{i}.content is missing (only an assistant message "
                           "with tool_calls may leave it out)", param=f"messages.{i}.content",
                           code="missing_parameter")
        out = {"role": self.role,
               "content": c if c is None or isinstance(c, str) else "".join(p.text for p in c)}
        if self.tool_calls:
            out["tool_calls"] = [t.model_dump() for t in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


class FunctionDef(_Body):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str | None = None
    parameters: dict | None = None       # a JSON Schema object
    strict: bool | None = None


class Tool(_Body):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: NamedFunction


class ChatRequest(_Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None

    @field_validator("max_completion_tokens", mode="before")
    @classmethod
    def _integral_cap(cls, v):
        return integral(v)

    @classmethod
    def neutral(cls) -> dict:
        return {k: v for k, v in NEUTRAL.items() if k != "tools"}

    def check(self) -> None:
        super().check()
        choice = self.tool_choice
        if choice is not None and choice not in TOOL_CHOICES:
            forced = (f"a named tool_choice would force a call of {choice.function.name!r}"
                      if isinstance(choice, NamedToolChoice) else
                      f"tool_choice {choice!r} would force a tool call")
            raise APIError(400, f"{forced}, and inferlab cannot force one: the server "
                           "does not constrain the model's output, and SmolLM2 does not write "
                           "tool calls. Use \"auto\" or \"none\".", param="tool_choice",
                           code="unsupported_parameter")

    def engine_inputs(self, max_model_len: int, tokenizer=None
                      ) -> tuple[list, list[SamplingParams]]:
        """The conversation as the engine takes it (messages), or, with ``tools``, the
        prompt text the chat template makes of both (``tokenizer``: the engine's)."""
        self.check()
        messages = [m.as_dict(i) for i, m in enumerate(self.messages)]
        # no cap asked: until the context is full (the engine stops at max_model_len)
        params = self.params(self.max_completion_tokens or self.max_tokens or max_model_len, 1)
        if self.tools:
            from ..core.prompts import render_messages
            try:
                prompt = render_messages(messages, tokenizer,
                                         [t.model_dump(exclude_none=True) for t in self.tools])
            except InferlabError as e:
                raise engine_error(e, "messages") from None
            return [prompt] * self.n, params
        return [messages] * self.n, params


def integral(v):
    """JSON has one kind of number: 2.0 is the integer 2, as JSON Schema and vLLM read it
    (strict validation refused it); in token-id lists too. "2" and true stay refused."""
    if type(v) is float and v.is_integer():
        return int(v)
    if isinstance(v, list):
        return [integral(x) if isinstance(x, (float, list)) else x for x in v]
    return v


def parse(model: type[_Sampling], raw: bytes) -> _Sampling:
    """Validate a request body; any problem becomes a 400 naming the field."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        errs = e.errors(include_url=False)
    err = errs[0]
    if err["type"] == "json_invalid":
        raise APIError(400, f"the request body is not valid JSON ({err['msg']})",
                       code="invalid_json")
    loc = _param(err["loc"])
    if err["type"] == "model_type" and not loc:
        raise APIError(400, "the request body must be a JSON object", code="invalid_json")
    if err["type"] == "missing":
        raise APIError(400, f"{loc} is missing", param=loc, code="missing_parameter")
    # a union (prompt: a string or token ids or ...) reports one error per alternative
    msgs = list(dict.fromkeys(x["msg"] for x in errs if _param(x["loc"]) == loc))
    raise APIError(400, f"{loc} is invalid: {', or '.join(msgs)} (got {err.get('input')!r:.80})",
                   param=loc or None, code="invalid_value")


def _param(loc) -> str:
    """The field's path as OpenAI names it (messages.0.content), without pydantic's tags
    for the alternatives of a union (``str``, ``list[int]``, a model's class name)."""
    return ".".join(str(x) for x in loc if isinstance(x, int) or x in _FIELDS)


_FIELDS = {f for m in (CompletionRequest, ChatRequest, Message, TextPart, StreamOptions,
                       FunctionCall, ToolCall, FunctionDef, Tool, NamedFunction,
                       NamedToolChoice) for f in m.model_fields}
