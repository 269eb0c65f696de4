//! What a batch's rows take: the bytes of their slices of its buffers, and the batch copied
//! into buffers of its own when it is a slice of bigger ones (a scan's batch dealt to tasks,
//! rows decoded from a worker's message, whose columns share that message's buffer). Holding
//! such a slice holds, and counts, every byte of the buffers it shares.
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatchOptions, UInt32Array};
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;

/// The bytes of `batch`'s rows: of their slices of its buffers, not of the buffers.
pub fn rows_bytes(batch: &RecordBatch) -> usize {
    let columns = batch.columns().iter();
    columns.map(column_bytes).sum()
}

fn column_bytes(c: &ArrayRef) -> usize {
    let slice = c
        .to_data()
        .get_slice_memory_size()
        .unwrap_or(c.get_array_memory_size());
    // A view array's slice is its views; the strings longer than a view are in buffers of
    // their own, of which it uses these bytes.
    slice
        + match c.data_type() {
            DataType::Utf8View => c.as_string_view().total_buffer_bytes_used(),
            DataType::BinaryView => c.as_binary_view().total_buffer_bytes_used(),
            _ => 0,
        }
}

/// `batch`, copied into buffers of its own when the buffers it holds are over `most_held` of
/// its rows' bytes.
pub fn in_own_buffers(
    batch: RecordBatch,
    most_held: impl Fn(usize) -> usize,
) -> Result<RecordBatch> {
    if batch.get_array_memory_size() <= most_held(rows_bytes(&batch)) {
        return Ok(batch);
    }
    let all = UInt32Array::from_iter_values(0..batch.num_rows() as u32);
    let taken = take_record_batch(&batch, &all)?;
    // `take` copies a view array's views, which still point into the buffers they were cut
    // from (a whole message's, for rows received from a worker): `gc` copies what they use.
    let columns = taken
        .columns()
        .iter()
        .map(|c| match c.data_type() {
            DataType::Utf8View => Arc::new(c.as_string_view().gc()) as ArrayRef,
            DataType::BinaryView => Arc::new(c.as_binary_view().gc()) as ArrayRef,
            _ => Arc::clone(c),
        })
        .collect();
    let options = RecordBatchOptions::new().with_row_count(Some(taken.num_rows()));
    Ok(RecordBatch::try_new_with_options(
        taken.schema(),
        columns,
        &options,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::StringViewArray;
    use datafusion::arrow::datatypes::{Field, Schema};

    fn strings(rows: usize) -> RecordBatch {
        let values = (0..rows).map(|i| format!("a string longer than a view's inline {i:08}"));
        let column = Arc::new(StringViewArray::from_iter_values(values)) as ArrayRef;
        let schema = Schema::new(vec![Field::new("s", DataType::Utf8View, false)]);
        RecordBatch::try_new(Arc::new(schema), vec![column]).unwrap()
    }

    #[test]
    fn a_view_array_s_rows_count_their_strings() {
        let batch = strings(100);
        // 100 views of 16 bytes, and 100 strings of 45 bytes in the data buffer.
        assert_eq!(rows_bytes(&batch), 100 * 16 + 100 * 45);
    }

    #[test]
    fn a_slice_of_a_view_array_is_copied_with_only_the_strings_it_uses() {
        let small = strings(10_000).slice(0, 10);
        assert!(small.get_array_memory_size() > 100 * rows_bytes(&small));
        let own = in_own_buffers(small.clone(), |used| used + used / 4).unwrap();
        assert!(
            own.get_array_memory_size() <= 2 * rows_bytes(&small) + 1024,
            "{} bytes held for {} of rows",
            own.get_array_memory_size(),
            rows_bytes(&small)
        );
        assert_eq!(
            own.column(0).as_string_view().value(9),
            small.column(0).as_string_view().value(9)
        );
    }
}
