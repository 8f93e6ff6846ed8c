"""Tokenizers: ``tokenizer.json`` through the tokenizers library, or the
demo's bytes. A model without either takes prompts as token ids."""

from __future__ import annotations

from pathlib import Path

from .loader import DEMO
from .models.config import ModelError
from .models.demo import EOS


class ByteTokenizer:
    """UTF-8 bytes are the tokens 0..255 (the demo model's vocabulary)."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    eos_token_id = EOS


class HFTokenizer:
    def __init__(self, path: Path):
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise ModelError(f"{path} needs the tokenizers library: pip install tokenizers") from None
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as exc:  # the library raises a bare Exception for unreadable and malformed files
            message = " ".join(str(exc).split())  # one line, whatever the library wrote
            raise ModelError(f"{path} cannot be loaded by the tokenizers library: {message}") from None

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


def load_tokenizer(model):
    if model in (None, DEMO):
        return ByteTokenizer()
    path = Path(model) / "tokenizer.json"
    return HFTokenizer(path) if path.is_file() else None


def encode_prompt(tokenizer, prompt) -> list[int]:
    """Token ids for a prompt given as text (needs a tokenizer) or as ids."""
    if isinstance(prompt, str):
        if tokenizer is None:
            from mixboard.errors import UsageError

            raise UsageError("this model has no tokenizer (no tokenizer.json): give prompts as token ids")
        return tokenizer.encode(prompt)
    return list(prompt)
