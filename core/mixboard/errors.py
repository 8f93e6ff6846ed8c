"""The errors mixboard raises. Every message is a sentence a user can act on."""


class MixboardError(Exception):
    """Base class of every error mixboard raises on purpose."""


class UsageError(MixboardError, ValueError):
    """The caller asked for something malformed: an unknown kind, a bad spec
    value, bad override syntax, an unknown backend name."""


class SelectionError(MixboardError):
    """No backend can serve a layer, or a forced backend fails its checks.

    ``candidates`` maps each backend name that was considered to the reasons
    it was rejected, so tools can show them without parsing the message.
    """

    def __init__(self, message: str, candidates: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.candidates = dict(candidates or {})


class BackendError(MixboardError):
    """A backend raised while making a layer's impl, building a step's
    metadata or running a layer. The message names the backend, the layer
    and what it raised, in one line; the original is the ``__cause__``."""


class PluginError(MixboardError):
    """A plugin fault while ``MIXBOARD_STRICT_PLUGINS=1`` is set."""


def did_you_mean(word: str, choices) -> str:
    """``"; did you mean 'x'?"`` naming the closest of ``choices``, or "" (the tail of a one-line error)."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
