"""Every planner knob ``DistributedConfig`` sends is datafusion-distributed's own default,
unless we chose otherwise and say why here: ``config.py`` sends every knob, so a default
changed upstream (or by a crate feature) would otherwise go unnoticed."""

from __future__ import annotations

from datafusion_distributed_py import DistributedConfig, _internal

#: Knobs whose default is ours, not the crate's, and why.
OURS = {
    # Distribution was asked for: a scan of a few MiB already splits into tasks.
    "distributed.file_scan_config_bytes_per_partition": ("1048576", "16777216"),
}


def _same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a.lower() == b.lower()


def test_every_knob_sent_is_the_planners_default_unless_we_say_why():
    crate = _internal.planner_defaults()
    sent = DistributedConfig().to_options()
    # Every knob the planner has is one we send, and every one we send, it has.
    assert set(sent) == set(crate), set(sent) ^ set(crate)
    for key, value in sent.items():
        if key in OURS:
            assert (value, crate[key]) == OURS[key], key
        else:
            assert _same(value, crate[key]), f"{key}: ours {value}, the planner's {crate[key]}"
