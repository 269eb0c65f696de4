"""The table of how a distributed frame handles each public method of
``datafusion.DataFrame`` (``frame_methods.METHODS``) covers every one: a method a new
datafusion adds fails here until it is given a handling."""

from __future__ import annotations

import inspect
import types

from datafusion import DataFrame, SessionContext, col

from datafusion_distributed_py import DistributedContext, dataframe
from datafusion_distributed_py.dataframe import running, terminals
from datafusion_distributed_py.frame_methods import METHODS, Handling, names


def _public() -> dict[str, types.FunctionType]:
    # datafusion's own methods, as the package read them before wrapping any.
    return dict(running.PUBLIC)


def test_every_public_method_is_classified():
    unclassified = sorted(set(_public()) - set(METHODS))
    assert not unclassified, f"decide how a distributed frame handles: {unclassified}"
    gone = sorted(set(METHODS) - set(_public()))
    assert not gone, f"classified but not a method of datafusion.DataFrame: {gone}"


def test_each_handling_is_what_the_frames_do():
    assert names(Handling.DISTRIBUTED) == set(terminals.COMPOSED)
    assert names(Handling.ON_RESULT) == running.ON_RESULT
    assert set(running.STEPS) == names(Handling.STEP) | names(Handling.TWIN)
    for name in names(Handling.STEP):
        returns = inspect.signature(_public()[name]).return_annotation
        assert returns in ("DataFrame", DataFrame), (name, returns)
    assert all(why for _, why in METHODS.values())


def test_a_step_stays_distributed_and_a_result_read_comes_from_the_workers():
    ctx = SessionContext()
    ctx.from_pydict({"k": [1, 2, 2, 3]}, name="t")
    dctx = DistributedContext(ctx, progress=False)
    stepped = dctx.table("t").filter(col("k") > 1)
    assert dataframe.ran_on(stepped) == "workers"
    assert sorted(r["k"] for r in stepped.to_pylist()) == [2, 2, 3]
