//! What a batch's rows take: the bytes of their slices of its buffers, and the batch copied
//! into buffers of its own when it is a slice of bigger ones (a scan's batch dealt to tasks,
//! rows decoded from a worker's message, whose columns share that message's buffer). Holding
//! such a slice holds, and counts, every byte of the buffers it shares.
use datafusion::arrow::array::UInt32Array;
use datafusion::arrow::compute::take_record_batch;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::Result;

/// The bytes of `batch`'s rows: of their slices of its buffers, not of the buffers.
pub fn rows_bytes(batch: &RecordBatch) -> usize {
    let columns = batch.columns().iter();
    columns
        .map(|c| {
            c.to_data()
                .get_slice_memory_size()
                .unwrap_or(c.get_array_memory_size())
        })
        .sum()
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
    Ok(take_record_batch(&batch, &all)?)
}
