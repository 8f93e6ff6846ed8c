"""Reading a Hugging Face ``config.json`` with errors that say what is wrong.

Every value a builder uses is read and checked here before any module is
built: a bad one is a ModelError naming the key, the value and what is
wanted. Sizes are bounded so that an absurd config fails at once instead of
building for minutes; the bounds sit far above every released model."""

from __future__ import annotations

import math
from typing import Any

from mixboard.errors import UsageError

from .. import checks
from ..checks import is_integer, show  # noqa: F401 (show: the model files' import)

# The deepest released models have ~130 layers; building 1024 on the meta device is well under a second.
MAX_LAYERS = 1024
# Any one width, head count, state size or vocabulary (released vocabularies are below 2**19). Products of
# two such sizes stay far from overflowing a tensor's element count.
MAX_SIZE = 2 ** 24
ROPE_SCALINGS = ("default", "linear", "llama3")

_REQUIRED = object()


class ModelError(UsageError):
    """A model directory, config or checkpoint that cannot be used as it is."""


def check_size(label: str, value, low: int = 1, high: int | None = MAX_SIZE) -> int:
    return checks.integer(f"config.json: {label}", value, low, high, error=ModelError)


def check_number(label: str, value, zero_ok: bool = False) -> float:
    """A finite number above 0 (or >= 0 with ``zero_ok``)."""
    return checks.real(f"config.json: {label}", value, 0, above=not zero_ok, error=ModelError)


class ConfigReader:
    def __init__(self, config: dict[str, Any], model_type: str):
        self.config = config
        self.model_type = model_type

    def _value(self, key: str, default):
        value = self.config.get(key)
        if value is None and default is _REQUIRED:
            raise ModelError(f"config.json has no {key!r}, which a {self.model_type} model needs")
        return value

    def opt(self, key: str, default, kind: type | None = None):
        value = self.config.get(key)
        if value is None:
            return default
        return self._typed(key, value, kind or type(default))

    def _typed(self, key, value, kind):
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is int and is_integer(value):
            return value
        if kind in (bool, str, list, dict) and isinstance(value, kind):
            return value
        raise ModelError(f"config.json: {key!r} must be {kind.__name__}, not {show(value)}")

    def choice(self, key: str, default, served: tuple, why: str = ""):
        """A setting the runner serves only some values of: any other is refused here, naming the key."""
        value = self.opt(key, default, type(default))
        if value not in served:
            wanted = " or ".join(map(repr, served))
            raise ModelError(f"config.json: {key!r} is {show(value)}; mixboard's {self.model_type} serves {wanted}"
                             f"{why}")
        return value

    def size(self, key: str, default=_REQUIRED, *, low: int = 1, high: int | None = MAX_SIZE):
        """A width, head count or the like: an int in [low, high] (high None: unbounded, for limits
        such as max_position_embeddings that allocate nothing). ``default`` when the key is absent or null."""
        value = self._value(key, default)
        return default if value is None else check_size(repr(key), value, low, high)

    def layers(self, key: str = "num_hidden_layers") -> int:
        return self.size(key, high=MAX_LAYERS)

    def number(self, key: str, default=_REQUIRED, *, zero_ok: bool = False):
        value = self._value(key, default)
        return default if value is None else check_number(repr(key), value, zero_ok)

    def indices(self, key: str) -> list[int]:
        """A list of layer indices (ints >= 0); empty when absent."""
        value = self.config.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(is_integer(i) and i >= 0 for i in value):
            raise ModelError(f"config.json: {key!r} must be a list of layer indices (integers >= 0), not {show(value)}")
        return value

    def divisible(self, key: str, value: int, by_key: str, by: int, note: str = "") -> None:
        if value % by:
            raise ModelError(f"config.json: {key!r} ({value}) must be a multiple of {by_key!r} ({by}){note}")

    def derived(self, what: str, value) -> int:
        """A size computed from several keys (``what`` says how), bounded as each key is."""
        if not 1 <= value <= MAX_SIZE:
            raise ModelError(f"config.json: {what} is {show(value)}; it must be from 1 to {MAX_SIZE}")
        return int(value)

    def spec(self, cls, **fields):
        """A kind's spec; its own checks (ValueError sentences) become ModelError."""
        try:
            return cls(**fields)
        except ValueError as exc:
            raise ModelError(f"config.json: {exc}") from None

    def rope(self, head_size: int, partial_default: float = 1.0) -> tuple[float, dict | None, int]:
        """(theta, scaling, rotary_dim) from transformers 5's ``rope_parameters``
        or the older ``rope_theta`` / ``rope_scaling`` / ``partial_rotary_factor``
        (``partial_default`` where neither gives it: Qwen3-Next's is 0.25)."""
        params = self.config.get("rope_parameters")
        if params is None:
            params = {}
        elif not isinstance(params, dict):
            raise ModelError(f"config.json: 'rope_parameters' must be an object, not {show(params)}")

        def pick(key, default):  # rope_parameters wins over the top level; each one present is checked
            value = default
            for label, source in ((repr(key), self.config), (f"'rope_parameters.{key}'", params)):
                if source.get(key) is not None:
                    value = check_number(label, source[key])
            return value

        theta, partial = pick("rope_theta", 10000.0), pick("partial_rotary_factor", partial_default)
        rotary_dim = int(head_size * partial)
        if partial > 1 or rotary_dim < 2 or rotary_dim % 2:
            raise ModelError(f"config.json: rotary embedding needs an even number of channels from 2 to head_dim "
                             f"({head_size}), but head_dim x partial_rotary_factor ({partial}) gives {rotary_dim}")
        key, scaling = "rope_scaling", self.config.get("rope_scaling") or None
        if params.get("rope_type", "default") != "default":
            key, scaling = "rope_parameters", params
        return theta, _rope_scaling(key, scaling), rotary_dim

    def eos_ids(self) -> tuple[int, ...]:
        eos = self.config.get("eos_token_id")
        if eos is None:
            return ()
        ids = eos if isinstance(eos, list) else [eos]
        if not all(is_integer(i) and i >= 0 for i in ids):
            raise ModelError(f"config.json: 'eos_token_id' must be a token id or a list of token ids "
                             f"(integers >= 0), not {show(eos)}")
        return tuple(ids)

    def time_step_limit(self) -> tuple[float, float]:
        value = self.config.get("time_step_limit") or (0.0, math.inf)
        try:
            if not isinstance(value, (list, tuple)):
                raise TypeError(value)
            low, high = (_json_float(v) for v in value)
        except (TypeError, ValueError):
            low = high = math.nan
        if not 0 <= low <= high:  # NaN fails too
            raise ModelError(f"config.json: 'time_step_limit' must be [low, high] with 0 <= low <= high, "
                             f"not {show(value)}")
        return low, high


def _rope_scaling(key: str, scaling) -> dict | None:
    """The rope scaling the runner applies (models.blocks.Rotary), checked: an unsupported one
    fails here, not at the first forward."""
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise ModelError(f"config.json: {key!r} must be an object, not {show(scaling)}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_SCALINGS:
        raise ModelError(f"config.json: {key!r} has rope type {show(kind)}, which mixboard does not support "
                         f"(supported: {', '.join(ROPE_SCALINGS)})")
    if kind == "default":
        return None
    check_number(f"'{key}.factor'", scaling.get("factor"))
    if kind == "llama3":
        low = check_number(f"'{key}.low_freq_factor'", scaling.get("low_freq_factor"))
        high = check_number(f"'{key}.high_freq_factor'", scaling.get("high_freq_factor"))
        if not low < high:
            raise ModelError(f"config.json: {key!r}: low_freq_factor ({low}) must be below high_freq_factor ({high})")
        check_size(f"'{key}.original_max_position_embeddings'", scaling.get("original_max_position_embeddings"),
                   high=None)
    return scaling


def _json_float(value) -> float:
    """A float as JSON writers spell it: 1.5, Infinity, "inf", or transformers 5's {"__float__": "Infinity"}."""
    if isinstance(value, dict) and set(value) == {"__float__"}:
        value = value["__float__"]
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)
