"""Every planner knob ``DistributedConfig`` sends is datafusion-distributed's own default,
unless we chose otherwise and say why here: ``config.py`` sends every knob, so a default
changed upstream (or by a crate feature) would otherwise go unnoticed."""

from __future__ import annotations

from conftest import SPLIT_CONFIG

from datafusion_distributed_py import DistributedConfig, DistributedContext, _internal
from datafusion_distributed_py.config import CORE_OPTIONS
from datafusion_distributed_py.testing import assert_same_rows, is_distributed, shuffle_bytes

#: Knobs whose default is ours, not the crate's, and why.
OURS = {
    # Distribution was asked for: a scan of a few MiB already splits into tasks.
    "distributed.file_scan_config_bytes_per_partition": ("1048576", "16777216"),
    # Made concrete per query: none between workers of one machine, else the crate's lz4.
    "distributed.compression": ("auto", "lz4"),
}


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a.lower() == b.lower()


def test_every_knob_sent_is_the_planners_default_unless_we_say_why():
    crate = _internal.planner_defaults()
    sent = DistributedConfig().to_options()
    # Ours that our core reads among them (joins planned from real sizes) are sent too.
    ours = {f"distributed.{name}" for name in CORE_OPTIONS}
    assert ours <= set(sent)
    sent = {k: v for k, v in sent.items() if k not in ours}
    # Every knob the planner has is one we send, and every one we send, it has.
    assert set(sent) == set(crate), set(sent) ^ set(crate)
    for key, value in sent.items():
        if key in OURS:
            assert (value, crate[key]) == OURS[key], key
        else:
            assert _same(value, crate[key]), f"{key}: ours {value}, the planner's {crate[key]}"


def test_auto_compression_leaves_shuffles_between_loopback_workers_uncompressed(ctx, cluster):
    """``compression="auto"`` (the default) sends worker processes of this machine their
    shuffles as they are; asked for, lz4 still compresses them."""
    sql = "SELECT l_comment, count(*) AS n FROM lineitem GROUP BY l_comment"
    moved = {}
    for compression in ("auto", "lz4", "none"):
        config = SPLIT_CONFIG.replace(compression=compression)
        dctx = DistributedContext(ctx, workers=cluster, config=config)
        df = dctx.sql(sql)
        assert_same_rows(df.to_arrow_table(), ctx.sql(sql).to_arrow_table(), ordered=False)
        assert is_distributed(dctx.explain(df))
        moved[compression] = shuffle_bytes(df)
    # (Batch boundaries vary from run to run, and with them a few bytes.)
    assert abs(moved["auto"] - moved["none"]) < 0.05 * moved["none"], moved
    assert moved["auto"] > 1.5 * moved["lz4"] > 0, moved
