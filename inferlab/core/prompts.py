"""Prompt normalisation: strings, token-id lists and chat messages all become token ids."""
from __future__ import annotations

import json

from ..errors import InvalidInputError, InvalidTypeError

ROLES = ("system", "user", "assistant", "tool", "developer")


def check_messages(messages) -> None:
    """Each message a dict with a role and string content; an assistant message may carry
    ``tool_calls`` (OpenAI's shape: ``{"id", "type": "function", "function": {"name",
    "arguments"}}``) and then no content (None)."""
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidTypeError(f"messages[{i}] must be a dict with 'role' and 'content', "
                                   f"got {type(m).__name__}")
        calls = m.get("tool_calls")
        if "role" not in m or ("content" not in m and not calls):
            raise InvalidInputError(f"messages[{i}] needs both 'role' and 'content' keys, "
                                    f"got keys {sorted(m)}")
        if m["role"] not in ROLES:
            raise InvalidInputError(f"messages[{i}]['role'] must be one of {ROLES}, "
                                    f"got {m['role']!r}")
        if calls is not None:
            if m["role"] != "assistant":
                raise InvalidInputError(f"messages[{i}] has tool_calls, which only an "
                                        f"assistant message can have (its role: {m['role']!r})")
            _check_functions(calls, f"messages[{i}]['tool_calls']", CALL_SHAPE)
        content = m.get("content")
        if not isinstance(content, str) and not (content is None and calls):
            raise InvalidTypeError(f"messages[{i}]['content'] must be a string, "
                                   f"got {type(content).__name__}")


CALL_SHAPE = "{'type': 'function', 'function': {'name': str, 'arguments': ...}}"
TOOL_SHAPE = ("{'type': 'function', 'function': {'name': str, 'description': str, "
              "'parameters': {...}}}")


def _check_functions(items, where: str, shape: str) -> None:
    """``items``: a list of {"function": {"name": str, ...}} (tool definitions, tool calls)."""
    if not isinstance(items, list):
        raise InvalidTypeError(f"{where} must be a list, got {type(items).__name__}")
    for j, c in enumerate(items):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidTypeError(f"{where}[{j}] must be {shape}, got {c!r:.80}")


def check_tools(tools) -> None:
    """OpenAI's tool definitions: ``[{"type": "function", "function": {"name", ...}}]``."""
    _check_functions(tools, "tools", TOOL_SHAPE)


# --- tools in the prompt -------------------------------------------------------------------
# A chat template that knows tools renders them itself (``apply_chat_template(tools=...)``),
# and likewise an assistant message's ``tool_calls``. One that does not (SmolLM2's) ignores
# both without a word; then the tools become a system message listing them, and the calls
# the assistant's text, both in the common <tool_call> JSON form (Hermes, Qwen2.5). Whether
# a template reads them is found once per template, by rendering a probe.
TOOLS_HEADER = ("You can call these functions. To call one, reply with only a JSON object "
                "inside <tool_call></tool_call> tags: {\"name\": <the function's name>, "
                "\"arguments\": <its arguments as a JSON object>}.")
_PROBE = "inferlab_probe_tool_7f3a"
_READS: dict[tuple[str, str], bool] = {}      # (template, "tools" | "tool_calls") -> reads it


def template_reads(tokenizer, what: str) -> bool:
    """Does the tokenizer's chat template render ``tools`` (what="tools") or an assistant
    message's ``tool_calls`` (what="tool_calls")? Found by rendering a probe, once."""
    key = (tokenizer.chat_template, what)
    if key not in _READS:
        fn = {"name": _PROBE, "description": "probe", "parameters": {"type": "object",
                                                                     "properties": {}}}
        msgs = [{"role": "user", "content": "x"}]
        kw = {}
        if what == "tools":
            kw["tools"] = [{"type": "function", "function": fn}]
        else:
            msgs += [{"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": _PROBE, "arguments": {}}}]},
                {"role": "tool", "tool_call_id": "call_0", "content": "y"},
                {"role": "user", "content": "z"}]
        try:
            text = tokenizer.apply_chat_template(msgs, tokenize=False, **kw)
        except Exception:  # noqa: BLE001 - a template that refuses the probe does not read it
            text = ""
        _READS[key] = _PROBE in text
    return _READS[key]


def _arguments(args):
    """A call's arguments as templates expect them: a dict when OpenAI's JSON string holds
    an object (as vLLM passes them), else unchanged."""
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            return args
        return parsed if isinstance(parsed, dict) else args
    return args


def _call_text(call: dict) -> str:
    fn = call["function"]
    return ("<tool_call>\n" + json.dumps({"name": fn["name"],
                                          "arguments": _arguments(fn.get("arguments", {}))})
            + "\n</tool_call>")


def tools_message(tools) -> str:
    """The system text that lists ``tools`` for a template that does not render them."""
    return "\n".join([TOOLS_HEADER, "<tools>", *(json.dumps(t) for t in tools), "</tools>"])


def render_messages(messages, tokenizer, tools=None) -> str:
    """The prompt text of a conversation (and the ``tools`` it may call) by the model's chat
    template, ending where the assistant's answer begins."""
    check_messages(messages)
    if tools is not None:
        check_tools(tools)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise InvalidInputError("this model has no chat template; pass a string or token ids")
    msgs = [dict(m) for m in messages]
    if any(m.get("tool_calls") for m in msgs):
        native = template_reads(tokenizer, "tool_calls")
        for m in msgs:
            if not m.get("tool_calls"):
                continue
            if native:
                m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": _arguments(
                    c["function"].get("arguments", {}))}} for c in m["tool_calls"]]
            else:
                text = "\n".join(_call_text(c) for c in m.pop("tool_calls"))
                m["content"] = f"{m['content']}\n{text}" if m.get("content") else text
    kw = {}
    if tools:
        if template_reads(tokenizer, "tools"):
            kw["tools"] = list(tools)
        elif msgs[0]["role"] in ("system", "developer"):
            msgs[0] = {**msgs[0], "content": f"{msgs[0]['content']}\n\n{tools_message(tools)}"}
        else:
            msgs.insert(0, {"role": "system", "content": tools_message(tools)})
    return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kw)


def to_token_ids(prompt, tokenizer, vocab_size: int) -> tuple[list[int], str | None]:
    """Return (token ids, prompt text or None) for a string, token-id list or message list."""
    if isinstance(prompt, str):
        if not prompt:
            raise InvalidInputError("prompt is empty; give at least one character or token")
        if tokenizer is None:
            raise InvalidInputError("this model has no tokenizer; pass token ids")
        ids = list(tokenizer.encode(prompt))
        if not ids:      # e.g. "\x14": the tokenizer drops control characters; with no token
            raise InvalidInputError(      # the request could never be scheduled
                f"prompt {prompt[:40]!r} has no tokens (the tokenizer drops every character "
                "of it); give some text")
        return ids, prompt
    if isinstance(prompt, (list, tuple)):
        if not prompt:
            raise InvalidInputError("prompt is empty; give at least one token or message")
        if all(isinstance(m, dict) for m in prompt):
            text = render_messages(prompt, tokenizer)
            return list(tokenizer.encode(text, add_special_tokens=False)), text
        ids = []
        for i, t in enumerate(prompt):
            if isinstance(t, bool) or not isinstance(t, int):
                raise InvalidTypeError(f"prompt token ids must all be ints; prompt[{i}] is "
                                       f"{type(t).__name__} {t!r}")
            if not 0 <= t < vocab_size:
                raise InvalidInputError(f"prompt[{i}] = {t} is outside the vocabulary "
                                        f"[0, {vocab_size})")
            ids.append(int(t))
        return ids, None
    raise InvalidTypeError(f"prompt must be a string, a list of token ids or a list of chat "
                           f"messages, got {type(prompt).__name__}")


def pair_prompts(prompts, params) -> tuple[list, list]:
    """``generate``'s arguments as (prompts, one params per prompt): a single prompt (string,
    token ids or messages) becomes a list of one; one params object serves every prompt."""
    if isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                    and isinstance(prompts[0], (int, dict))):
        prompts = [prompts]
    if not isinstance(prompts, (list, tuple)):
        raise InvalidTypeError(f"prompts must be a list, got {type(prompts).__name__}")
    if isinstance(params, (list, tuple)):
        if len(params) != len(prompts):
            raise InvalidInputError(f"got {len(params)} SamplingParams for {len(prompts)} "
                                    "prompts; give one, or one per prompt")
        return list(prompts), list(params)
    return list(prompts), [params] * len(prompts)
