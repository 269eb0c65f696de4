//! A snapshot: the data files a table version is made of, with their partition values.
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef, Schema, SchemaRef};
use datafusion::common::stats::Precision;
use datafusion::common::{exec_datafusion_err, ColumnStatistics, Result, ScalarValue, Statistics};
use datafusion::datasource::listing::PartitionedFile;
use datafusion::execution::object_store::ObjectStoreUrl;
use object_store::path::Path;
use url::Url;

/// One data file as the table's log lists it.
#[derive(Clone, Debug)]
pub struct SnapshotFile {
    /// Absolute URL (`file:///...`, `s3://bucket/...`).
    pub url: String,
    pub size: u64,
    /// Its row count, when the log records it.
    pub rows: Option<u64>,
    /// The value of each partition column, as the log writes it (None: null).
    pub partition_values: Vec<Option<String>>,
    /// What the log records of the file's columns: `(name, min, max, null count)`, values as
    /// strings (the columns it has none for left out).
    pub columns: Vec<ColumnStats>,
}

/// A column's `(name, min, max, null count)` in one file, as a table's log records them.
pub type ColumnStats = (String, Option<String>, Option<String>, Option<u64>);

/// The files of one table version, resolved against the table's schema.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub store: ObjectStoreUrl,
    /// Each file, with its partition values (typed) for pruning. Where the partition columns
    /// are not stored in the files (Delta), the scan adds them as columns too.
    pub files: Vec<(PartitionedFile, Vec<ScalarValue>)>,
    /// Each file's statistics over the scan's columns (`scan_schema`): its rows and bytes,
    /// and the log's per-column bounds as estimates.
    pub statistics: Vec<Statistics>,
}

impl Snapshot {
    /// `files`, their partition values typed as `partition_fields`; all on one object store.
    /// `as_columns`: the scan adds the partition values as columns (they are not in the files).
    /// `scan_schema`: the scan's columns, which each file's statistics describe.
    pub fn new(
        files: &[SnapshotFile],
        partition_fields: &[FieldRef],
        as_columns: bool,
        scan_schema: &Schema,
    ) -> Result<Self> {
        let mut store: Option<ObjectStoreUrl> = None;
        let mut out = Vec::with_capacity(files.len());
        for file in files {
            let url = Url::parse(&file.url)
                .map_err(|e| exec_datafusion_err!("data file URL {:?}: {e}", file.url))?;
            let this_store = ObjectStoreUrl::parse(&url[..url::Position::BeforePath])?;
            match &store {
                None => store = Some(this_store),
                Some(s) if *s != this_store => {
                    return Err(exec_datafusion_err!(
                        "the table's data files are on two object stores ({} and {}): \
                         one table must live on one store",
                        s.as_str(),
                        this_store.as_str()
                    ))
                }
                Some(_) => {}
            }
            let path = Path::from_url_path(url.path())
                .map_err(|e| exec_datafusion_err!("data file path {:?}: {e}", url.path()))?;
            let mut pf = PartitionedFile::new(path, file.size);
            let values: Vec<ScalarValue> = partition_fields
                .iter()
                .zip(&file.partition_values)
                .map(|(field, value)| typed(field, value.as_deref()))
                .collect::<Result<_>>()?;
            if as_columns {
                pf.partition_values = values.clone();
            }
            out.push((pf, values));
        }
        let store = store.unwrap_or_else(ObjectStoreUrl::local_filesystem);
        let statistics = files
            .iter()
            .zip(&out)
            .map(|(file, (_, values))| file_statistics(file, partition_fields, values, scan_schema))
            .collect();
        Ok(Self {
            store,
            files: out,
            statistics,
        })
    }
}

/// What the log says of one file, as DataFusion's planner reads statistics: the row count
/// (exact, as a listing table reads it from footers) and size; the columns' bounds and null
/// counts only as estimates (they size joins' sides and filters' selectivity), never answers:
/// a log may truncate a string's bounds, and nothing here is checked against the file.
fn file_statistics(
    file: &SnapshotFile,
    partition_fields: &[FieldRef],
    partition_values: &[ScalarValue],
    scan_schema: &Schema,
) -> Statistics {
    let columns = scan_schema
        .fields()
        .iter()
        .map(|field| {
            let mut stats = ColumnStatistics::new_unknown();
            if let Some(i) = partition_fields
                .iter()
                .position(|p| p.name() == field.name())
            {
                let value = &partition_values[i];
                if !value.is_null() {
                    stats.min_value = Precision::Inexact(value.clone());
                    stats.max_value = Precision::Inexact(value.clone());
                }
                return stats;
            }
            let Some((_, min, max, nulls)) = file.columns.iter().find(|c| &c.0 == field.name())
            else {
                return stats;
            };
            // Strings and bytes: a log's bounds may be cut short, so no bound is read.
            if !matches!(
                field.data_type(),
                DataType::Utf8
                    | DataType::Utf8View
                    | DataType::LargeUtf8
                    | DataType::Binary
                    | DataType::BinaryView
                    | DataType::LargeBinary
            ) {
                let bound = |v: &Option<String>| {
                    v.as_ref()
                        .and_then(|v| {
                            ScalarValue::try_from_string(v.clone(), field.data_type()).ok()
                        })
                        .map_or(Precision::Absent, Precision::Inexact)
                };
                stats.min_value = bound(min);
                stats.max_value = bound(max);
            }
            stats.null_count = nulls.map_or(Precision::Absent, |n| Precision::Inexact(n as usize));
            stats
        })
        .collect();
    Statistics {
        num_rows: file
            .rows
            .map_or(Precision::Absent, |r| Precision::Exact(r as usize)),
        total_byte_size: Precision::Inexact(file.size as usize),
        column_statistics: columns,
    }
}

/// A partition value as the log writes it (a string), as `field`'s type.
fn typed(field: &FieldRef, value: Option<&str>) -> Result<ScalarValue> {
    match value {
        None => ScalarValue::try_from(field.data_type()),
        Some(v) => ScalarValue::try_from_string(v.to_string(), field.data_type()).map_err(|e| {
            exec_datafusion_err!(
                "partition value {v:?} of column {} is not a {}: {e}",
                field.name(),
                field.data_type()
            )
        }),
    }
}

/// The fields of `schema` named in `names`, in that order.
pub fn fields_named(schema: &SchemaRef, names: &[String]) -> Result<Vec<FieldRef>> {
    names
        .iter()
        .map(|n| {
            schema
                .field_with_name(n)
                .map(|f| Arc::new(f.clone()))
                .map_err(|_| exec_datafusion_err!("partition column {n:?} is not in the schema"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field};

    #[test]
    fn partition_values_are_typed_and_nulls_kept() {
        let fields = vec![
            Arc::new(Field::new("p", DataType::Int32, true)),
            Arc::new(Field::new("d", DataType::Date32, true)),
        ];
        let files = [SnapshotFile {
            url: "file:///t/p=1/d=2020-01-02/a%20b.parquet".into(),
            size: 10,
            rows: Some(3),
            partition_values: vec![Some("1".into()), None],
            columns: vec![],
        }];
        let schema = Schema::new(fields.clone());
        let s = Snapshot::new(&files, &fields, true, &schema).unwrap();
        assert_eq!(s.store.as_str(), "file:///");
        let (f, values) = &s.files[0];
        assert_eq!(&f.partition_values, values);
        let kept_apart = Snapshot::new(&files, &fields, false, &schema).unwrap();
        assert!(kept_apart.files[0].0.partition_values.is_empty());
        assert_eq!(
            f.object_meta.location.as_ref(),
            "t/p=1/d=2020-01-02/a b.parquet"
        );
        assert_eq!(f.partition_values[0], ScalarValue::Int32(Some(1)));
        assert_eq!(f.partition_values[1], ScalarValue::Date32(None));
    }

    #[test]
    fn files_on_two_stores_are_refused_by_name() {
        let files = [
            SnapshotFile {
                url: "s3://a/x.parquet".into(),
                size: 1,
                rows: None,
                partition_values: vec![],
                columns: vec![],
            },
            SnapshotFile {
                url: "s3://b/y.parquet".into(),
                size: 1,
                rows: None,
                partition_values: vec![],
                columns: vec![],
            },
        ];
        let err = Snapshot::new(&files, &[], true, &Schema::empty())
            .unwrap_err()
            .to_string();
        assert!(err.contains("s3://a/") && err.contains("s3://b/"), "{err}");
    }

    #[test]
    fn the_logs_bounds_are_estimates_and_strings_get_none() {
        let fields: Vec<FieldRef> = vec![
            Arc::new(Field::new("k", DataType::Int64, true)),
            Arc::new(Field::new("s", DataType::Utf8, true)),
            Arc::new(Field::new("p", DataType::Int32, true)),
        ];
        let files = [SnapshotFile {
            url: "file:///t/p=7/f.parquet".into(),
            size: 100,
            rows: Some(5),
            partition_values: vec![Some("7".into())],
            columns: vec![
                ("k".into(), Some("1".into()), Some("9".into()), Some(0)),
                ("s".into(), Some("a".into()), Some("zz".into()), Some(2)),
            ],
        }];
        let schema = Schema::new(fields.clone());
        let s = Snapshot::new(&files, &fields[2..], true, &schema).unwrap();
        let stats = &s.statistics[0];
        assert_eq!(stats.num_rows, Precision::Exact(5));
        let k = &stats.column_statistics[0];
        assert_eq!(k.min_value, Precision::Inexact(ScalarValue::Int64(Some(1))));
        assert_eq!(k.max_value, Precision::Inexact(ScalarValue::Int64(Some(9))));
        let text = &stats.column_statistics[1];
        assert_eq!(text.max_value, Precision::Absent);
        assert_eq!(text.null_count, Precision::Inexact(2));
        let p = &stats.column_statistics[2];
        assert_eq!(p.min_value, Precision::Inexact(ScalarValue::Int32(Some(7))));
    }
}
