"""Snapshot tables: tables over exactly a list of files, never a directory listing — a table
format's snapshot (``lakehouse``: Delta Lake, Iceberg), a pyarrow dataset of files
(``datasets``), Avro files (``avro``). Each is registered on the user's session as our own
table provider (``_internal.SnapshotTable``), which single-node reads like any table; its scan
travels to the workers as an ordinary file scan, split into tasks.

Shared by all of them: why a table's queries run single-node and which object stores its files
live on (``registry``), the schema DataFusion shows for Parquet (``schemas``), and stores from
a format's storage options (``stores``).
"""
