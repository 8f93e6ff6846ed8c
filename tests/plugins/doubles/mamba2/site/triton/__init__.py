"""Test double: stands in for triton only so that ``importlib.util.find_spec("triton")``
finds it in selection tests. Nothing in the doubles imports it."""
