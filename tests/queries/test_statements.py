"""``dctx.sql`` reads a statement as ``ctx.sql`` does: DataFusion's own parse decides what is a
``SET distributed.*``, an ``EXPLAIN`` or a query — comments, case and options included."""

from __future__ import annotations

import pytest
from datafusion import SessionContext, col
from datafusion import functions as f

from datafusion_distributed_py import DistributedContext
from datafusion_distributed_py.testing import assert_ran_on_workers, is_distributed

QUERY = "SELECT k, count(*) AS n FROM t GROUP BY k"


@pytest.fixture
def dctx() -> DistributedContext:
    ctx = SessionContext()
    ctx.from_pydict({"k": [1, 2, 2, 3, 3, 3]}, name="t")
    return DistributedContext(ctx, progress=False)


@pytest.mark.parametrize(
    "statement",
    [
        "-- fewer tasks, for a test\nSET distributed.max_tasks_per_stage = 1",
        "/* a block comment */ SET distributed.max_tasks_per_stage TO 1;",
        "sEt DiStRiBuTeD.Max_Tasks_Per_Stage = '1'",
    ],
)
def test_a_setting_however_written_changes_the_config(dctx, statement):
    df = dctx.sql(statement)
    assert dctx.config.max_tasks_per_stage == 1
    assert df.to_pylist() == []  # SET answers no rows, as single-node's does


def test_a_set_inside_a_string_is_a_query(dctx):
    sql = "SELECT 'SET distributed.max_tasks_per_stage = 1' AS s"
    assert dctx.sql(sql).to_pylist() == dctx.ctx.sql(sql).to_pylist()
    assert dctx.config.max_tasks_per_stage != 1


@pytest.mark.parametrize(
    "statement",
    [
        "SET distributed.max_tasks_per_stage = 1; SELECT 1",  # two statements
        "SET datafusion.no_such_option = 1",  # DataFusion's own namespace
        "SELEC 1",  # not SQL
    ],
)
def test_other_statements_fail_as_single_node(dctx, statement):
    with pytest.raises(Exception) as single:
        dctx.ctx.sql(statement).collect()
    with pytest.raises(Exception) as distributed:
        dctx.sql(statement).collect()
    assert type(distributed.value) is type(single.value)
    assert str(distributed.value) == str(single.value)


@pytest.mark.parametrize(
    ("statement", "kind"),
    [
        (f"-- the plan, please\nEXPLAIN {QUERY}", "distributed_plan"),
        (f"explain verbose {QUERY}", "distributed_plan"),
        (f"EXPLAIN FORMAT indent {QUERY}", "distributed_plan"),
        (f"/* with metrics */ Explain Analyze {QUERY}", "Plan with Metrics"),
    ],
)
def test_explain_however_written_shows_the_distributed_plan(dctx, statement, kind):
    (row,) = dctx.sql(statement).to_pylist()
    assert row["plan_type"] == kind
    assert "DistributedExec" in row["plan"] and is_distributed(row["plan"]), row["plan"]


def test_a_session_setting_changed_between_queries_reaches_the_next_plan(workers):
    """The session's settings are read at each query (and the planner reuses them only while
    they are the same): a SET on the session itself, and its undoing, reach the next plan,
    through SQL and through the DataFrame API alike."""
    ctx = SessionContext()
    ctx.from_pydict({"k": [1, 2, 2, 3, 3, 3]}, name="t")
    dctx = DistributedContext(ctx, workers, progress=False)
    want = sorted(ctx.sql(QUERY).to_pylist(), key=str)

    def planned_with(partitions: int) -> None:
        frame = dctx.table("t").aggregate([col("k")], [f.count(col("k")).alias("n")])
        for df in (dctx.sql(QUERY), frame):
            assert f"Hash([k@0], {partitions})" in dctx.explain(df)
            assert sorted(df.to_pylist(), key=str) == want
            assert_ran_on_workers(df, dctx)

    ctx.sql("SET datafusion.execution.target_partitions = 3")
    planned_with(3)
    ctx.sql("SET datafusion.execution.target_partitions = 5")
    planned_with(5)
    ctx.sql("SET datafusion.execution.target_partitions = 3")
    planned_with(3)
