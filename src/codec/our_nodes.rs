//! Our own plan nodes in fragments, in one place for the session codec: each is written as a
//! tag (and its own data) with its children encoded as usual, and read back by the module
//! that owns it.
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;

use super::{field_metadata, recursive_queries, scan_compression, task_merge, write_commit};
use crate::kept;

type Encode = fn(&Arc<dyn ExecutionPlan>, &mut Vec<u8>) -> Option<Result<()>>;
type Decode = fn(&[u8], &[Arc<dyn ExecutionPlan>]) -> Option<Result<Arc<dyn ExecutionPlan>>>;

const NODES: [(Encode, Decode); 7] = [
    (scan_compression::encode, scan_compression::decode),
    (field_metadata::encode, field_metadata::decode),
    (task_merge::encode, task_merge::decode),
    (write_commit::encode, write_commit::decode),
    (kept::encode_keep, kept::decode_keep),
    (kept::encode_scan, |buf, _inputs| kept::decode_scan(buf)),
    (recursive_queries::encode, recursive_queries::decode),
];

/// Writes `node` if it is one of ours.
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    NODES.iter().find_map(|(encode, _)| encode(node, buf))
}

/// The plan `buf` and its decoded children stand for, if `buf` is one of ours.
pub fn decode(
    buf: &[u8],
    children: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    NODES.iter().find_map(|(_, decode)| decode(buf, children))
}
