//! How plans travel: the codecs that encode plan fragments for workers (Python UDFs inline,
//! what DataFusion's own encoding drops: file scans' compression, function results'
//! field metadata).
/// The plan-node half of `PhysicalExtensionCodec` (`try_decode`, `try_encode`), forwarded to
/// `$codec`, an expression of `$this` (the codec itself): our codecs differ only in how they
/// treat functions, so their node methods are all the same forwarding.
macro_rules! forward_node_codec {
    (|$this:ident| $codec:expr) => {
        fn try_decode(
            &self,
            buf: &[u8],
            inputs: &[::std::sync::Arc<dyn ::datafusion::physical_plan::ExecutionPlan>],
            ctx: &::datafusion::execution::TaskContext,
            converter: &dyn ::datafusion_proto::physical_plan::PhysicalProtoConverterExtension,
        ) -> ::datafusion::common::Result<
            ::std::sync::Arc<dyn ::datafusion::physical_plan::ExecutionPlan>,
        > {
            let $this = self;
            $codec.try_decode(buf, inputs, ctx, converter)
        }

        fn try_encode(
            &self,
            node: ::std::sync::Arc<dyn ::datafusion::physical_plan::ExecutionPlan>,
            buf: &mut Vec<u8>,
            converter: &dyn ::datafusion_proto::physical_plan::PhysicalProtoConverterExtension,
        ) -> ::datafusion::common::Result<()> {
            let $this = self;
            $codec.try_encode(node, buf, converter)
        }
    };
}

mod field_metadata;
mod fragment;
mod lost_modifiers;
mod our_nodes;
mod partial_sort;
mod recursive_queries;
mod scan_compression;
mod session;
mod shared_rows;
mod task_merge;
#[cfg(test)]
mod test_support;
mod window_filters;
mod window_functions;
mod window_topn;
mod wire;
mod write_commit;

pub use field_metadata::mark as mark_for_repair;
pub use lost_modifiers::{names_ignore_nulls, window_direction};
pub use window_filters::{filtered_windows, from_logical as restore_window_filters};

/// A decoded plan with what DataFusion 55's encoding drops but the plan still tells given
/// back: function results' field metadata, window and grouping-set modifiers. Runs wherever
/// a plan is decoded (the coordinator's planner; on workers, through the marker at each
/// fragment's root, `mark_for_repair`).
pub fn repair_decoded(
    plan: std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
) -> datafusion::common::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    field_metadata::restore_field_metadata(lost_modifiers::restore_lost_modifiers(plan)?)
}
pub use fragment::{copy_fragment, encode_fragment, fragment_codec, FragmentCodec};
pub use partial_sort::{PartialSort, SortColumn};
pub use scan_compression::wrap as wrap_compressed_scans;
pub use session::{builtins, SessionCodec, SessionFunctions};
pub use window_functions::{
    register_from_headers as register_window_functions, to_headers as window_function_headers,
    window_exprs,
};
pub use wire::{WireCodec, WIRE_CODEC_ID};
