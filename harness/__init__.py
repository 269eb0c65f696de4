"""The project's test and benchmark harness — not part of the wheel: the differential runner
(single-node vs distributed, DataFusion's sqllogictest corpus) and TPC-DS data and queries
(DuckDB's dsdgen). Tests and benchmarks import it from the repository root."""
