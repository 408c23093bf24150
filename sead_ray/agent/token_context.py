"""Token-exact multi-turn context for the agent: generated tokens are never re-tokenized.

The context starts as the chat template rendered for (system, opening) with a generation prompt.
Each agent turn appends the token ids the engine sampled (loss mask 1, with their sampling
logprobs); the template's end-of-turn text, the user's message and the next generation prompt are
appended as rendered suffixes (mask 0). The engine is prompted with exactly these ids every turn,
and the trainer sees the same ids, so rollout and trainer logprobs are comparable token by token.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_PLACEHOLDER = "\x00SEAD_PLACEHOLDER\x00"


class IncrementalChatEncoder:
    """`prefill`: text each agent turn starts with, appended after every generation prompt (mask 0)."""

    def __init__(self, tokenizer: Any, prefix_messages: Sequence[dict], prefill: str = ""):
        self.tokenizer = tokenizer
        self.prefill = prefill
        prefix_messages = list(prefix_messages)
        text = tokenizer.apply_chat_template(prefix_messages, tokenize=False, add_generation_prompt=True) + prefill
        self.token_ids: list[int] = self._encode(text)
        self.loss_mask: list[int] = [0] * len(self.token_ids)
        self.logprobs: list[float] = [0.0] * len(self.token_ids)
        self._end_of_turn, self._user_prefix, self._user_suffix = _template_pieces(tokenizer, prefix_messages)
        eos = tokenizer.eos_token
        self._eos_id = tokenizer.convert_tokens_to_ids(eos) if eos else None
        # The end-of-turn text after a generation that already ended with EOS.
        self._after_eos = self._end_of_turn[len(eos):] if eos and self._end_of_turn.startswith(eos) else None

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    def _append(self, ids: Sequence[int], mask: int, logprobs: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([mask] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def prompt_ids(self) -> list[int]:
        return self.token_ids

    def add_generation(self, token_ids: list[int], logprobs: list[float]) -> None:
        if len(logprobs) != len(token_ids):
            raise ValueError(f"{len(token_ids)} generated tokens but {len(logprobs)} logprobs")
        self._append(token_ids, 1, logprobs)
        if token_ids and self._after_eos is not None and token_ids[-1] == self._eos_id:
            self._append(self._encode(self._after_eos), 0)
        else:  # cut by max_tokens: close the turn as the template would
            self._append(self._encode(self._end_of_turn), 0)

    def add_scripted(self, text: str) -> None:
        """An agent turn the policy did not generate (a scripted start: sead_ray.play.starts), as the agent's own
        earlier turn: `text` after the prefill, then the template's end of turn, all out of the loss (mask 0)."""
        self._append(self._encode(text[len(self.prefill):] if text.startswith(self.prefill) else text), 0)
        self._append(self._encode(self._end_of_turn), 0)

    def add_user(self, content: str) -> None:
        self._append(self._encode(self._user_prefix + content + self._user_suffix + self.prefill), 0)


def _template_pieces(tokenizer: Any, prefix: list[dict]) -> tuple[str, str, str]:
    """Split the template into: text after an assistant message's content, and the text before and
    after a user message's content up to the next generation prompt."""
    with_assistant = prefix + [{"role": "assistant", "content": _PLACEHOLDER}]
    t_asst = tokenizer.apply_chat_template(with_assistant, tokenize=False)
    with_user = with_assistant + [{"role": "user", "content": _PLACEHOLDER}]
    t_user = tokenizer.apply_chat_template(with_user, tokenize=False, add_generation_prompt=True)
    if not t_user.startswith(t_asst):
        raise ValueError("the chat template re-renders earlier turns; token-exact multi-turn needs a "
                         "template whose rendering of a longer chat extends the shorter one")
    end_of_turn = t_asst[t_asst.index(_PLACEHOLDER) + len(_PLACEHOLDER):]
    rest = t_user[len(t_asst):]
    user_prefix, user_suffix = rest.split(_PLACEHOLDER)
    return end_of_turn, user_prefix, user_suffix
