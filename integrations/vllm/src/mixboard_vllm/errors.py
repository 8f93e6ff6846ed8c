"""The one error this integration raises: vLLM shows its text as the worker's failure."""


class StartupError(RuntimeError):
    """vLLM cannot run this model through mixboard as configured; the text says which layer and what to do."""
