"""Chat messages to token ids with a tokenizer's chat template, incrementally: the context is
extended by the model's own tokens and by the rendered tool results, never re-tokenised, so the
token sequence is exactly what the model saw and generated."""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]
# Text the probes render; only their positions matter, never their tokens.
_PROBE_BASE = [{"role": "user", "content": "probe"}, {"role": "assistant", "content": "PROBE_ANSWER"}]
# Without a tokenizer, a token is about this many characters of English and code.
CHARS_PER_TOKEN = 4


class ChatTemplateError(ValueError):
    pass


class ChatTokenizer:
    def __init__(self, tokenizer):
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError(
                "the tokenizer has no chat template; use an instruction-tuned model's tokenizer "
                "(or set tokenizer.chat_template) so turns can be rendered")
        self.tokenizer = tokenizer
        self.tool_role_supported = self._renders_tool_role()
        base = self.render(_PROBE_BASE, add_generation_prompt=False)
        # What the template writes after an assistant's content (e.g. "<|im_end|>\n").
        self.turn_suffix = base[base.rindex("PROBE_ANSWER") + len("PROBE_ANSWER"):]
        self._probe_prefix = base

    def _renders_tool_role(self) -> bool:
        try:
            text = self.tokenizer.apply_chat_template(
                [*_PROBE_BASE, {"role": "tool", "name": "t", "content": "TOOL_PROBE"}], tokenize=False)
        except Exception:  # templates that reject the role raise their own error types
            return False
        return "TOOL_PROBE" in text

    def _normalise(self, messages: list[Message]) -> list[Message]:
        if self.tool_role_supported:
            return messages
        return [{"role": "user", "content": f"<tool_response>\n{m['content']}\n</tool_response>"}
                if m["role"] == "tool" else m for m in messages]

    def render(self, messages: list[Message], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            self._normalise(messages), tokenize=False, add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        """The whole conversation, ending with the prompt for the assistant's next turn."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def turn_end_ids(self, generated_text: str) -> list[int]:
        """The part of the template's end of an assistant turn that the model did not generate:
        all of it after a length cut-off, the newline after an end-of-turn token, or nothing."""
        suffix = self.turn_suffix
        for length in range(len(suffix), 0, -1):
            if generated_text.endswith(suffix[:length]):
                return self.encode(suffix[length:]) if suffix[length:] else []
        return self.encode(suffix)

    def continuation_ids(self, new_messages: list[Message]) -> list[int]:
        """Tokens of messages that follow a finished assistant turn, plus the next turn's prompt."""
        full = self.render([*_PROBE_BASE, *new_messages], add_generation_prompt=True)
        if not full.startswith(self._probe_prefix):
            raise ChatTemplateError("the chat template re-renders earlier turns when a message is added; "
                                    "incremental token records need a template that only appends")
        return self.encode(full[len(self._probe_prefix):])

    def count(self, messages: list[Message]) -> int:
        return len(self.prompt_ids(messages))


def estimate_tokens(messages: list[Message]) -> int:
    """A token count for engines that give no tokenizer (hosted chat endpoints)."""
    return sum(len(str(m.get("content") or "")) for m in messages) // CHARS_PER_TOKEN + 4 * len(messages)
