//! What the codec tests share: a codec of DataFusion's encodings plus our nodes, a plan's
//! round trip through it, and a plan's rows as text.
use std::sync::Arc;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::Result;
use datafusion::execution::TaskContext;
use datafusion::physical_plan::{collect, ExecutionPlan};
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_extension_codec,
};
use datafusion_proto::physical_plan::{
    DefaultPhysicalExtensionCodec, PhysicalExtensionCodec, PhysicalProtoConverterExtension,
};

use super::{our_nodes, window_topn};

#[derive(Debug)]
pub struct OurNodes;

impl PhysicalExtensionCodec for OurNodes {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        our_nodes::decode(buf, inputs, ctx)
            .or_else(|| window_topn::decode(buf, inputs, ctx, self, converter))
            .unwrap_or_else(|| {
                DefaultPhysicalExtensionCodec {}.try_decode(buf, inputs, ctx, converter)
            })
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        our_nodes::encode(&node, buf)
            .or_else(|| window_topn::encode(&node, buf, self, converter))
            .unwrap_or_else(|| DefaultPhysicalExtensionCodec {}.try_encode(node, buf, converter))
    }
}

/// The physical plan `sql` plans to on `ctx`.
pub async fn physical(
    ctx: &datafusion::prelude::SessionContext,
    sql: &str,
) -> Arc<dyn ExecutionPlan> {
    let df = ctx.sql(sql).await.unwrap();
    df.create_physical_plan().await.unwrap()
}

/// `plan` encoded and decoded again, as a fragment travels.
pub fn round_trip(plan: Arc<dyn ExecutionPlan>, ctx: &TaskContext) -> Arc<dyn ExecutionPlan> {
    let bytes = physical_plan_to_bytes_with_extension_codec(plan, &OurNodes).unwrap();
    physical_plan_from_bytes_with_extension_codec(&bytes, ctx, &OurNodes).unwrap()
}

/// `plan`'s rows, as a table.
pub async fn rows(plan: Arc<dyn ExecutionPlan>, ctx: Arc<TaskContext>) -> String {
    let batches = collect(plan, ctx).await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
}
