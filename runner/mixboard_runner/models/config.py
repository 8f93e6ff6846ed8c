"""Reading a Hugging Face ``config.json`` with errors that say what is wrong."""

from __future__ import annotations

import math
from typing import Any

from mixboard.errors import UsageError


class ModelError(UsageError):
    """A model directory, config or checkpoint that cannot be used as it is."""


class ConfigReader:
    def __init__(self, config: dict[str, Any], model_type: str):
        self.config = config
        self.model_type = model_type

    def req(self, key: str, kind: type = int):
        if self.config.get(key) is None:
            raise ModelError(f"config.json has no {key!r}, which a {self.model_type} model needs")
        return self._typed(key, self.config[key], kind)

    def opt(self, key: str, default, kind: type | None = None):
        value = self.config.get(key)
        if value is None:
            return default
        return self._typed(key, value, kind or type(default))

    def _typed(self, key, value, kind):
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind in (bool, str, list, dict) and isinstance(value, kind):
            return value
        raise ModelError(f"config.json: {key!r} must be {kind.__name__}, not {value!r}")

    def rope(self) -> tuple[float, dict | None, float]:
        """(theta, scaling, partial_rotary_factor) from transformers 5's
        ``rope_parameters`` or the older ``rope_theta`` / ``rope_scaling``."""
        params = self.config.get("rope_parameters") or {}
        scaling = self.config.get("rope_scaling") or None
        theta = params.get("rope_theta", self.config.get("rope_theta", 10000.0))
        partial = params.get("partial_rotary_factor", self.config.get("partial_rotary_factor", 1.0))
        if params.get("rope_type", "default") != "default":
            scaling = params
        return float(theta), scaling, float(partial)

    def eos_ids(self) -> tuple[int, ...]:
        eos = self.config.get("eos_token_id")
        if eos is None:
            return ()
        return tuple(eos) if isinstance(eos, list) else (int(eos),)

    def time_step_limit(self) -> tuple[float, float]:
        value = self.config.get("time_step_limit") or (0.0, math.inf)
        try:
            low, high = (_json_float(v) for v in value)
        except (TypeError, ValueError):
            raise ModelError(f"config.json: 'time_step_limit' must be [low, high], not {value!r}") from None
        return low, high


def _json_float(value) -> float:
    """A float as JSON writers spell it: 1.5, Infinity, "inf", or transformers 5's {"__float__": "Infinity"}."""
    if isinstance(value, dict) and set(value) == {"__float__"}:
        value = value["__float__"]
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)
