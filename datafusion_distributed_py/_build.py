"""Build facts, readable before the Rust extension is imported."""

#: The DataFusion major version of the Rust crates compiled into ``_internal``
#: (checked against ``_internal.DATAFUSION_MAJOR`` by the tests).
DATAFUSION_MAJOR = 55
