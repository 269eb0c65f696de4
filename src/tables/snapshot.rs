//! A snapshot: the data files a table version is made of, with their partition values.
use std::sync::Arc;

use datafusion::arrow::datatypes::{FieldRef, SchemaRef};
use datafusion::common::{exec_datafusion_err, Result, ScalarValue};
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
}

/// The files of one table version, resolved against the table's schema.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub store: ObjectStoreUrl,
    /// Each file, with its partition values (typed) for pruning. Where the partition columns
    /// are not stored in the files (Delta), the scan adds them as columns too.
    pub files: Vec<(PartitionedFile, Vec<ScalarValue>)>,
    /// Each file's row count, when the log records every file's.
    pub rows: Option<Vec<u64>>,
}

impl Snapshot {
    /// `files`, their partition values typed as `partition_fields`; all on one object store.
    /// `as_columns`: the scan adds the partition values as columns (they are not in the files).
    pub fn new(
        files: &[SnapshotFile],
        partition_fields: &[FieldRef],
        as_columns: bool,
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
        let rows = files.iter().map(|f| f.rows).collect();
        Ok(Self {
            store,
            files: out,
            rows,
        })
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
        }];
        let s = Snapshot::new(&files, &fields, true).unwrap();
        assert_eq!(s.store.as_str(), "file:///");
        let (f, values) = &s.files[0];
        assert_eq!(&f.partition_values, values);
        let kept_apart = Snapshot::new(&files, &fields, false).unwrap();
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
            },
            SnapshotFile {
                url: "s3://b/y.parquet".into(),
                size: 1,
                rows: None,
                partition_values: vec![],
            },
        ];
        let err = Snapshot::new(&files, &[], true).unwrap_err().to_string();
        assert!(err.contains("s3://a/") && err.contains("s3://b/"), "{err}");
    }
}
