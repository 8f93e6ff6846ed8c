"""Test double of mamba-ssm 2.3 (the functions mixboard-mamba1 calls)."""

__version__ = "2.3.0"
