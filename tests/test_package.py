"""The wheel is the product: the test and benchmark harness stays in the repository."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).parents[1]


def test_the_harness_is_not_in_the_package():
    for module in ("differential", "tpcds"):
        assert importlib.util.find_spec(f"datafusion_distributed_py.{module}") is None
    config = (ROOT / "pyproject.toml").read_text()
    assert 'python-packages = ["datafusion_distributed_py"]' in config  # what maturin packs
    assert importlib.util.find_spec("harness.differential") is not None  # from the repo root
