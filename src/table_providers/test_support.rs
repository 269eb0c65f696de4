//! What tests of more than one module build: a snapshot table over files on disk.
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::parquet::arrow::ArrowWriter;

use super::{SnapshotFile, SnapshotTable};

/// Two data files under `p=a/` and `p=b/` of a fresh directory (a removed third file sits
/// beside them: only the snapshot's files are read), and the table over the two.
pub fn partitioned_table() -> (SnapshotTable, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("dfdpy-snapshot-{}", uuid::Uuid::new_v4()));
    let file_schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Utf8, true),
    ]));
    let mut files = vec![];
    for (part, first) in [("a", 0), ("b", 10), ("removed", 100)] {
        std::fs::create_dir_all(dir.join(format!("p={part}"))).unwrap();
        let path = dir.join(format!("p={part}/0.parquet"));
        let batch = RecordBatch::try_new(
            Arc::clone(&file_schema),
            vec![
                Arc::new(Int64Array::from_iter_values(first..first + 3)),
                Arc::new(StringArray::from(vec!["x", "y", "z"])),
            ],
        )
        .unwrap();
        let mut writer = ArrowWriter::try_new(
            std::fs::File::create(&path).unwrap(),
            file_schema.clone(),
            None,
        )
        .unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        if part != "removed" {
            files.push(SnapshotFile {
                url: url::Url::from_file_path(&path).unwrap().to_string(),
                size: std::fs::metadata(&path).unwrap().len(),
                rows: Some(3),
                partition_values: vec![Some(part.to_string())],
                columns: vec![],
            });
        }
    }
    // The table's order puts the partition column between the files' columns.
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("p", DataType::Utf8, true),
        Field::new("v", DataType::Utf8, true),
    ]));
    let table = SnapshotTable::new(
        "t".into(),
        schema,
        vec!["p".into()],
        false,
        &files,
        None,
        vec![],
    )
    .unwrap();
    (table, dir)
}
