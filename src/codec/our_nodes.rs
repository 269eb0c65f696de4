//! Our own plan nodes in fragments, in one place for the session codec: each is written as a
//! tag (and its own data) with its children encoded as usual, and read back by the module
//! that owns it.
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;

use super::{
    field_metadata, partial_sort, recursive_queries, scan_compression, task_merge, window_filters,
    write_commit,
};
use crate::file_stream;
use crate::kept;
use crate::spool;

type Encode = fn(&Arc<dyn ExecutionPlan>, &mut Vec<u8>) -> Option<Result<()>>;
type Decode =
    fn(&[u8], &[Arc<dyn ExecutionPlan>], &TaskContext) -> Option<Result<Arc<dyn ExecutionPlan>>>;

const NODES: [(Encode, Decode); 11] = [
    (scan_compression::encode, |buf, inputs, _| {
        scan_compression::decode(buf, inputs)
    }),
    (field_metadata::encode, |buf, inputs, _| {
        field_metadata::decode(buf, inputs)
    }),
    (task_merge::encode, |buf, inputs, _| {
        task_merge::decode(buf, inputs)
    }),
    (write_commit::encode, |buf, inputs, _| {
        write_commit::decode(buf, inputs)
    }),
    (kept::encode_keep, |buf, inputs, _| {
        kept::decode_keep(buf, inputs)
    }),
    (kept::encode_scan, |buf, _, _| kept::decode_scan(buf)),
    (recursive_queries::encode, |buf, inputs, _| {
        recursive_queries::decode(buf, inputs)
    }),
    (window_filters::encode, window_filters::decode),
    (spool::encode, |buf, inputs, _| spool::decode(buf, inputs)),
    (file_stream::encode, |buf, _, _| file_stream::decode(buf)),
    (partial_sort::encode, |buf, inputs, _| {
        partial_sort::decode(buf, inputs)
    }),
];

/// Writes `node` if it is one of ours.
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    NODES.iter().find_map(|(encode, _)| encode(node, buf))
}

/// The plan `buf` and its decoded children stand for, if `buf` is one of ours.
pub fn decode(
    buf: &[u8],
    children: &[Arc<dyn ExecutionPlan>],
    ctx: &TaskContext,
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    NODES
        .iter()
        .find_map(|(_, decode)| decode(buf, children, ctx))
}
