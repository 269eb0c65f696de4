"""Bad input gets a clear exception, never wrong rows or an empty result."""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from datafusion import SessionContext

from datafusion_distributed_py import (
    DistributedConfig,
    DistributedContext,
    DistributedError,
    UnsupportedTableError,
    _internal,
    ran_on,
)
from datafusion_distributed_py._compat import check_datafusion_major
from datafusion_distributed_py.dataframe import source_of


def test_not_a_session_context():
    with pytest.raises(TypeError, match="SessionContext"):
        DistributedContext(42)


def test_empty_worker_list():
    with pytest.raises(ValueError, match="workers"):
        DistributedContext(SessionContext(), workers=[])


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "localhost:50051",
        "http://",
        "://x:1",
        "grpc://h:50051",
        "http://h:99999",
        "http://h:50051/path",
    ],
)
def test_malformed_worker_url(url):
    with pytest.raises(ValueError, match="URL") as e:
        DistributedContext(SessionContext(), workers=["http://127.0.0.1:50051", url])
    assert repr(url) in str(e.value) or f'"{url}"' in str(e.value)


def test_missing_scheme_suggests_http():
    with pytest.raises(ValueError, match='did you mean "http://127.0.0.1:50051"'):
        DistributedContext(SessionContext(), workers=["127.0.0.1:50051"])


def test_worker_urls_read_as_written():
    urls = ["http://127.0.0.1:50051", "https://[::1]:50052"]
    assert DistributedContext(SessionContext(), workers=urls).worker_urls == urls


def test_single_string_instead_of_list():
    with pytest.raises(TypeError, match="list"):
        DistributedContext(SessionContext(), workers="http://localhost:50051")


def test_bad_config_type():
    with pytest.raises(TypeError, match="DistributedConfig"):
        DistributedContext(SessionContext(), config={"max_tasks_per_stage": 2})


def test_sql_error_keeps_datafusion_message(dctx):
    with pytest.raises(Exception, match="no_such_table"):
        dctx.sql("SELECT * FROM no_such_table")
    with pytest.raises(Exception, match="(?i)no_such_column"):
        dctx.sql("SELECT no_such_column FROM nation")


STRICT = DistributedConfig(fallback="error")


def test_pyarrow_dataset_table_runs_single_node_with_a_warning(caplog):
    ctx = SessionContext()
    ctx.register_dataset("pads", ds.dataset(pa.table({"a": [1, 2, 3]})))
    with caplog.at_level(logging.WARNING, logger="datafusion_distributed_py"):
        df = DistributedContext(ctx).sql("SELECT sum(a) AS s FROM pads")
        assert ran_on(df) == "coordinator"  # planned when first used, as it says
    assert "pads" in caplog.text and "pyarrow dataset" in caplog.text
    assert df.to_pylist() == [{"s": 6}]


def test_pyarrow_dataset_table_is_refused_with_its_name(tmp_path):
    ctx = SessionContext()
    ctx.register_dataset("pads", ds.dataset(pa.table({"a": [1, 2, 3]})))
    ctx.from_pydict({"a": [1, 2]}, name="other_t")
    dctx = DistributedContext(ctx, config=STRICT)
    with pytest.raises(UnsupportedTableError, match="(?s)pads.*pyarrow dataset"):
        dctx.sql("SELECT sum(a) FROM pads")
    assert issubclass(UnsupportedTableError, DistributedError)
    # Only the table that cannot travel is named, also when a subquery reads it.
    with pytest.raises(UnsupportedTableError, match="pads") as e:
        dctx.sql("SELECT a FROM other_t WHERE a IN (SELECT a FROM pads)")
    assert "other_t" not in str(e.value).split("Cause:")[0]


def test_version_mismatch_message():
    with pytest.raises(ImportError, match=r"54\.1\.0.*55|55.*54\.1\.0"):
        check_datafusion_major("54.1.0", 55)
    check_datafusion_major("55.0.0", 55)


def test_config_validation():
    with pytest.raises(TypeError):
        DistributedConfig(max_tasks_per_stage="4")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        DistributedConfig(max_tasks_per_stage=-1)
    with pytest.raises(TypeError):
        DistributedConfig(no_such_knob=1)  # type: ignore[call-arg]


def test_insert_into_memory_table_is_refused_with_its_name():
    ctx = SessionContext()
    ctx.sql("CREATE TABLE mem_t AS SELECT 1 AS a")
    dctx = DistributedContext(ctx, config=STRICT)
    with pytest.raises(UnsupportedTableError, match=r"(?s)mem_t.*INSERT INTO"):
        dctx.sql("INSERT INTO mem_t VALUES (2)")
    assert ctx.sql("SELECT count(*) AS n FROM mem_t").to_pylist() == [{"n": 1}]
    # By default it runs single-node, once.
    DistributedContext(ctx).sql("INSERT INTO mem_t VALUES (2)").collect()
    assert ctx.sql("SELECT count(*) AS n FROM mem_t").to_pylist() == [{"n": 2}]


def test_table_provider_from_another_ffi_library_is_refused_with_its_name():
    # A table exported by another library over DataFusion's FFI (here: a distributed result
    # of this package, registered as a table) has no codec that can ship it to workers.
    ctx = SessionContext()
    ctx.from_pydict({"a": [1, 2, 3]}, name="base")
    plan = source_of(DistributedContext(ctx).sql("SELECT a FROM base"))
    assert isinstance(plan, _internal.DistributedPlan)
    ctx.register_table("foreign_t", plan)
    assert ctx.sql("SELECT sum(a) AS s FROM foreign_t").to_pylist() == [{"s": 6}]
    with pytest.raises(UnsupportedTableError, match="foreign_t"):
        DistributedContext(ctx, config=STRICT).sql("SELECT sum(a) AS s FROM foreign_t")
    assert DistributedContext(ctx).sql("SELECT sum(a) AS s FROM foreign_t").to_pylist() == [
        {"s": 6}
    ]


def test_worker_stop_takes_any_drain_time():
    """An unlimited drain (``inf``) waits for in-flight work instead of panicking; ``nan`` is
    refused by name."""
    from datafusion_distributed_py import Worker

    Worker(port=0).start().stop(float("inf"))
    worker = Worker(port=0).start()
    with pytest.raises(ValueError, match="drain_seconds"):
        worker.stop(float("nan"))
    worker.stop(0.0)
