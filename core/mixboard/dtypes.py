"""Dtype names. Specs carry dtypes as strings so that listing, explaining and
selecting never need torch imported, and so plans serialize to JSON as is."""

DTYPES = ("float32", "bfloat16", "float16", "float64")


def check_dtype(name: str) -> str:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(DTYPES)}")
    return name


def torch_dtype(name: str):
    """The torch dtype for a dtype name (imports torch)."""
    import torch

    return getattr(torch, check_dtype(name))


def dtype_name(dtype) -> str:
    """The name a spec carries for a torch dtype (``torch.float32`` -> ``"float32"``), the
    inverse of ``torch_dtype``; also how messages name a tensor's dtype."""
    return str(dtype).removeprefix("torch.")
