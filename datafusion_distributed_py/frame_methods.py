"""Every public method of ``datafusion.DataFrame``, and what a frame this package returned
does with it: one table, decided method by method.

A method a new ``datafusion`` release adds is in no row: ``tests/dataframe/test_frame_methods.py``
fails until it is given one, and until then a distributed frame runs it on its distributed
result as it is (the answer single-node's, the work on the coordinator).

Example:
    >>> from datafusion_distributed_py.frame_methods import METHODS, Handling
    >>> METHODS["filter"][0] is Handling.STEP
    True
    >>> METHODS["count"][0] is Handling.DISTRIBUTED
    True
"""

from __future__ import annotations

from enum import Enum


class Handling(Enum):
    """What a distributed frame does with a method."""

    #: A step of the DataFrame API: applied to the frame's single-node twin (the same query
    #: single-node), the new frame distributed as one query when first used.
    STEP = "step"
    #: A terminal planned so that the work stays on the workers (a limit, a count, a file
    #: sink inside the distributed plan).
    DISTRIBUTED = "distributed"
    #: Reads the distributed result as it is (the rows come from the workers).
    RESULT = "result"
    #: Reads the frame's plan, not its result: the single-node twin answers, as single-node.
    TWIN = "twin"
    #: Builds on the distributed result; what it returns is distributed again.
    ON_RESULT = "on result"
    #: Refused, with the reason given.
    REFUSED = "refused"


_STEP = "a new frame over the twin's plan, distributed when first used"
_RESULT = "the rows as the workers computed them"
_TWIN = "answered from the query's plan, as single-node answers it"

#: Each public method -> how a distributed frame handles it, and why.
METHODS: dict[str, tuple[Handling, str]] = {
    # Steps of the DataFrame API.
    **{
        name: (Handling.STEP, _STEP)
        for name in (
            "aggregate",
            "alias",
            "cast",
            "distinct",
            "distinct_on",
            "drop",
            "except_all",
            "fill_nan",
            "fill_null",
            "filter",
            "head",
            "intersect",
            "join",
            "join_on",
            "limit",
            "repartition",
            "repartition_by_hash",
            "select",
            "select_exprs",
            "sort",
            "sort_by",
            "union",
            "union_by_name",
            "union_distinct",
            "unnest_columns",
            "window",
            "with_column",
            "with_column_renamed",
            "with_columns",
        )
    },  # fmt: skip
    # Terminals planned distributed.
    "cache": (Handling.DISTRIBUTED, "the result kept on the workers that computed it"),
    "count": (Handling.DISTRIBUTED, "a count(*) over the query, distributed"),
    "show": (Handling.DISTRIBUTED, "the limit inside the distributed plan"),
    "tail": (Handling.DISTRIBUTED, "the count and the offset limit both distributed"),
    "collect_column": (Handling.DISTRIBUTED, "only that column leaves the workers"),
    "explain": (Handling.DISTRIBUTED, "the distributed plan, with its stages"),
    "execution_plan": (Handling.DISTRIBUTED, "the distributed plan's root"),
    "write_parquet": (Handling.DISTRIBUTED, "a COPY: each task writes its own files"),
    "write_csv": (Handling.DISTRIBUTED, "a COPY: each task writes its own files"),
    "write_json": (Handling.DISTRIBUTED, "a COPY: each task writes its own files"),
    "write_parquet_with_options": (Handling.DISTRIBUTED, "a COPY with the writer options"),
    # Reads of the distributed result.
    **{
        name: (Handling.RESULT, _RESULT)
        for name in (
            "collect",
            "collect_partitioned",
            "execute_stream",
            "execute_stream_partitioned",
            "schema",
            "to_arrow_table",
            "to_pandas",
            "to_polars",
            "to_pydict",
            "to_pylist",
            "write_table",
        )
    },  # fmt: skip
    # Reads of the plan.
    **{
        name: (Handling.TWIN, _TWIN)
        for name in (
            "col",
            "column",
            "find_qualified_columns",
            "into_view",
            "logical_plan",
            "optimized_logical_plan",
            "parse_sql_expr",
        )
    },  # fmt: skip
    # Built on the result.
    "describe": (Handling.ON_RESULT, "statistics of the distributed result"),
    "transform": (Handling.ON_RESULT, "the user's function called with the distributed frame"),
}


def names(handling: Handling) -> frozenset[str]:
    """The methods handled as ``handling``."""
    return frozenset(name for name, (h, _) in METHODS.items() if h is handling)
