//! `WireCodec`: the codec datafusion-python's serialiser asks for the nodes it cannot write.
//! It writes a [`SnapshotScanExec`] as the native scan inside it, a kept table's scan
//! (`kept::KeptScanExec`) as the reference it is, and a recursive query and its work table
//! (`codec::recursive_queries`).
//!
//! Installed on the session the coordinator serialises plans with
//! (`ctx.with_physical_extension_codec`), it is handed our own leaf back over FFI (the
//! library marker gives back the original node), encodes the plan inside it with
//! datafusion-proto, and on decoding returns that plan: after the coordinator decodes, the
//! table is an ordinary Parquet scan, which the distributed planner splits into tasks.
//! datafusion-python's own nodes arrive foreign, showing their name and schema only: a
//! recursive query's name and `is_distinct` are announced before serialising, in the order
//! the serialiser meets them (`announce_recursive_queries`).
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use datafusion::common::{exec_datafusion_err, exec_err, Result};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{AggregateUDF, ScalarUDF, WindowUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
};
use datafusion_proto::physical_plan::{
    DefaultPhysicalExtensionCodec, PhysicalExtensionCodec, PhysicalProtoConverterExtension,
};

use super::partial_sort::{encode_announced as write_partial_sort, PartialSort};
use super::recursive_queries::{
    decode as decode_recursive_query, write_query as write_recursive_query, write_work_table,
};
use crate::file_stream::{encode_announced, Announced};
use crate::object_stores::{register_all, StoreSpec};
use crate::table_providers::SnapshotScanExec;

/// The id the coordinator installs [`WireCodec`] under on its serialising session.
pub const WIRE_CODEC_ID: &str = "datafusion_distributed_py.snapshot_scans.v1";

#[derive(Debug, Default)]
pub struct WireCodec {
    /// (name, is_distinct) of the recursive queries of the plan being serialised, in the
    /// order the serialiser meets them (depth first, children in order).
    announced: Mutex<VecDeque<(String, bool)>>,
    /// The unbounded file tables the plan being serialised scans.
    streams: Mutex<Announced>,
    /// The partial sorts of the plan being serialised, as their displays tell them.
    partial_sorts: Mutex<Vec<PartialSort>>,
}

impl WireCodec {
    /// The recursive queries of the next plan serialised (see the module).
    pub fn announce_recursive_queries(&self, queries: Vec<(String, bool)>) {
        *self.announced.lock().expect("poisoned") = queries.into();
    }

    /// The partial sorts of the next plan serialised (see `codec::partial_sort`).
    pub fn announce_partial_sorts(&self, sorts: Vec<PartialSort>) {
        *self.partial_sorts.lock().expect("poisoned") = sorts;
    }

    /// The unbounded file tables of the next plan serialised (see `file_stream`).
    pub fn announce_streams(&self, streams: Announced) {
        *self.streams.lock().expect("poisoned") = streams;
    }
}

/// The stores and the plan bytes of an encoded scan.
fn split(buf: &[u8]) -> Result<(Vec<StoreSpec>, &[u8])> {
    let bad = || exec_datafusion_err!("not a snapshot scan encoded by WireCodec");
    let (len, rest) = buf.split_first_chunk::<8>().ok_or_else(bad)?;
    let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| bad())?;
    if rest.len() < len {
        return Err(bad());
    }
    let (stores, plan) = rest.split_at(len);
    let stores = serde_json::from_slice(stores).map_err(|_| bad())?;
    Ok((stores, plan))
}

impl PhysicalExtensionCodec for WireCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(kept) = crate::kept::decode_scan(buf) {
            return kept;
        }
        if let Some(recursive) = decode_recursive_query(buf, inputs) {
            return recursive;
        }
        if let Some(stream) = crate::file_stream::decode(buf) {
            return stream;
        }
        if let Some(sort) = super::partial_sort::decode(buf, inputs) {
            return sort;
        }
        let (stores, plan) = split(buf)?;
        // Decoding a file scan looks its store up: the table's own, which the session given
        // over FFI does not have.
        let runtime = Arc::new(RuntimeEnv::default());
        register_all(&runtime, &stores)?;
        let ctx = TaskContext::new(
            ctx.task_id(),
            ctx.session_id(),
            ctx.session_config().clone(),
            ctx.scalar_functions().clone(),
            ctx.higher_order_functions().clone(),
            ctx.aggregate_functions().clone(),
            ctx.window_functions().clone(),
            runtime,
        );
        physical_plan_from_bytes_with_extension_codec(plan, &ctx, &DefaultPhysicalExtensionCodec {})
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(kept) = crate::kept::encode_scan(&node, buf) {
            return kept;
        }
        if let Some(stream) = crate::file_stream::encode(&node, buf) {
            return stream;
        }
        match node.name() {
            "RecursiveQueryExec" => {
                let announced = self.announced.lock().expect("poisoned").pop_front();
                let Some((name, distinct)) = announced else {
                    return exec_err!("a recursive query that was not announced");
                };
                return write_recursive_query(&name, distinct, &node.schema(), buf);
            }
            "WorkTableExec" => return write_work_table(&node.schema(), buf),
            "PartialSortExec" => {
                let announced = self.partial_sorts.lock().expect("poisoned");
                return write_partial_sort(&node, &announced, buf);
            }
            "StreamingTableExec" => {
                let announced = self.streams.lock().expect("poisoned");
                return encode_announced(&node, &announced, buf);
            }
            _ => {}
        }
        let Some(scan) = node.downcast_ref::<SnapshotScanExec>() else {
            return exec_err!(
                "WireCodec encodes snapshot and kept scans and recursive queries only"
            );
        };
        let bytes = physical_plan_to_bytes_with_extension_codec(
            Arc::clone(scan.inner()),
            &DefaultPhysicalExtensionCodec {},
        )?;
        // The stores (serde JSON, never logged) first, with their length; then the plan.
        let stores = serde_json::to_vec(scan.stores())
            .map_err(|e| exec_datafusion_err!("encoding the table's stores: {e}"))?;
        buf.extend_from_slice(&(stores.len() as u64).to_le_bytes());
        buf.extend_from_slice(&stores);
        buf.extend_from_slice(&bytes);
        Ok(())
    }

    // Functions are the session's own codec's business: an Ok here would claim them.
    fn try_decode_udf(&self, name: &str, _buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        exec_err!("WireCodec does not decode functions ({name})")
    }

    fn try_encode_udf(&self, node: &ScalarUDF, _buf: &mut Vec<u8>) -> Result<()> {
        exec_err!("WireCodec does not encode functions ({})", node.name())
    }

    fn try_decode_udaf(&self, name: &str, _buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        exec_err!("WireCodec does not decode functions ({name})")
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, _buf: &mut Vec<u8>) -> Result<()> {
        exec_err!("WireCodec does not encode functions ({})", node.name())
    }

    fn try_decode_udwf(&self, name: &str, _buf: &[u8]) -> Result<Arc<WindowUDF>> {
        exec_err!("WireCodec does not decode functions ({name})")
    }

    fn try_encode_udwf(&self, node: &WindowUDF, _buf: &mut Vec<u8>) -> Result<()> {
        exec_err!("WireCodec does not encode functions ({})", node.name())
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::RecordBatch;
    use datafusion::physical_plan::{collect, displayable};
    use datafusion::prelude::SessionContext;
    use datafusion_proto::physical_plan::DefaultPhysicalProtoConverter;

    use super::*;
    use crate::table_providers::test_support::partitioned_table;

    #[tokio::test]
    async fn partition_filters_prune_files_and_the_scan_travels_as_a_parquet_scan() {
        let (table, dir) = partitioned_table();
        let ctx = SessionContext::new();
        ctx.register_table("t", Arc::new(table)).unwrap();
        let plan = ctx
            .sql("SELECT v, k FROM t WHERE p = 'b'")
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        let shown = displayable(plan.as_ref()).indent(true).to_string();
        assert!(shown.contains("SnapshotScanExec: table=t"), "{shown}");
        // The leaf as the codec writes it: the native scan inside, with its file pruned.
        let mut leaf = Arc::clone(&plan);
        while let Some(child) = leaf.children().first() {
            leaf = Arc::clone(child);
        }
        let mut bytes = vec![];
        WireCodec::default()
            .try_encode(
                Arc::clone(&leaf),
                &mut bytes,
                &DefaultPhysicalProtoConverter {},
            )
            .unwrap();
        let decoded = WireCodec::default()
            .try_decode(
                &bytes,
                &[],
                &ctx.task_ctx(),
                &DefaultPhysicalProtoConverter {},
            )
            .unwrap();
        let inner = displayable(decoded.as_ref()).indent(true).to_string();
        assert!(
            inner.contains("DataSourceExec") && inner.contains("p=b/0.parquet"),
            "{inner}"
        );
        assert!(!inner.contains("p=a/"), "{inner}");
        let rows: usize = collect(decoded, ctx.task_ctx())
            .await
            .unwrap()
            .iter()
            .map(RecordBatch::num_rows)
            .sum();
        assert_eq!(rows, 3);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
