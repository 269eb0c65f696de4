//! How plan fragments are encoded for workers.
//!
//! datafusion-distributed encodes with `Composed[DistributedCodec, user codecs...]`, and a
//! Composed codec gives a function to the first codec that accepts it. `DistributedCodec`
//! accepts every function (by name, writing nothing), so a Python UDF would never reach the
//! session's own codec, which inlines it as a cloudpickle payload, and a worker could only
//! look it up by name and fail. We encode with a codec that is wire-compatible position by
//! position — `DistributedNodes` (the same node encodings as `DistributedCodec`) at 0 and the
//! session codec at 1 — but whose position 0 leaves every function that is not built into
//! DataFusion to the session codec. Workers decode with the crate's own chain.
use std::collections::HashSet;
use std::sync::{Arc, LazyLock};

use datafusion::common::{not_impl_err, Result};
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{AggregateUDF, ScalarUDF, WindowUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::DistributedCodec;
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_proto_converter, physical_plan_to_bytes_with_proto_converter,
};
use datafusion_proto::physical_plan::{
    ComposedPhysicalExtensionCodec, DeduplicatingProtoConverter, PhysicalExtensionCodec,
    PhysicalProtoConverterExtension,
};

/// Names of the functions every DataFusion session has: these travel by name.
static BUILTIN_FUNCTIONS: LazyLock<HashSet<String>> = LazyLock::new(|| {
    let state = SessionStateBuilder::new().with_default_features().build();
    let mut names = HashSet::new();
    names.extend(state.scalar_functions().keys().cloned());
    names.extend(state.aggregate_functions().keys().cloned());
    names.extend(state.window_functions().keys().cloned());
    names
});

#[derive(Debug)]
struct DistributedNodes;

impl DistributedNodes {
    fn by_name(name: &str) -> Result<()> {
        match BUILTIN_FUNCTIONS.contains(name) {
            true => Ok(()),
            false => not_impl_err!("{name} is not built in: the session codec encodes it"),
        }
    }
}

impl PhysicalExtensionCodec for DistributedNodes {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        DistributedCodec.try_decode(buf, inputs, ctx, converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        DistributedCodec.try_encode(node, buf, converter)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, _buf: &mut Vec<u8>) -> Result<()> {
        Self::by_name(node.name())
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, _buf: &mut Vec<u8>) -> Result<()> {
        Self::by_name(node.name())
    }

    fn try_encode_udwf(&self, node: &WindowUDF, _buf: &mut Vec<u8>) -> Result<()> {
        Self::by_name(node.name())
    }
}

/// The codec chain for plan fragments, with the session's codec at position 1.
pub fn fragment_codec(session: Arc<dyn PhysicalExtensionCodec>) -> ComposedPhysicalExtensionCodec {
    ComposedPhysicalExtensionCodec::new(vec![Arc::new(DistributedNodes), session])
}

pub fn encode_fragment(
    plan: Arc<dyn ExecutionPlan>,
    codec: &ComposedPhysicalExtensionCodec,
) -> Result<Vec<u8>> {
    let converter = DeduplicatingProtoConverter::default();
    Ok(physical_plan_to_bytes_with_proto_converter(plan, codec, &converter)?.to_vec())
}

pub fn decode_fragment(
    bytes: &[u8],
    ctx: &TaskContext,
    codec: &ComposedPhysicalExtensionCodec,
) -> Result<Arc<dyn ExecutionPlan>> {
    let converter = DeduplicatingProtoConverter::default();
    physical_plan_from_bytes_with_proto_converter(bytes, ctx, codec, &converter)
}
