"""Prompt normalisation: strings, token-id lists and chat messages all become token ids."""
from __future__ import annotations

from ..errors import InvalidInputError, InvalidTypeError

ROLES = ("system", "user", "assistant", "tool", "developer")


def check_messages(messages) -> None:
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise InvalidTypeError(f"messages[{i}] must be a dict with 'role' and 'content', "
                                   f"got {type(m).__name__}")
        if "role" not in m or "content" not in m:
            raise InvalidInputError(f"messages[{i}] needs both 'role' and 'content' keys, "
                                    f"got keys {sorted(m)}")
        if m["role"] not in ROLES:
            raise InvalidInputError(f"messages[{i}]['role'] must be one of {ROLES}, "
                                    f"got {m['role']!r}")
        if not isinstance(m["content"], str):
            raise InvalidTypeError(f"messages[{i}]['content'] must be a string, "
                                   f"got {type(m['content']).__name__}")


def render_messages(messages, tokenizer) -> str:
    check_messages(messages)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise InvalidInputError("this model has no chat template; pass a string or token ids")
    return tokenizer.apply_chat_template(list(messages), tokenize=False,
                                         add_generation_prompt=True)


def to_token_ids(prompt, tokenizer, vocab_size: int) -> tuple[list[int], str | None]:
    """Return (token ids, prompt text or None) for a string, token-id list or message list."""
    if isinstance(prompt, str):
        if not prompt:
            raise InvalidInputError("prompt is empty; give at least one character or token")
        if tokenizer is None:
            raise InvalidInputError("this model has no tokenizer; pass token ids")
        return list(tokenizer.encode(prompt)), prompt
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
