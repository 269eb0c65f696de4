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
//!
//! Upstream: the positions match datafusion-distributed 4.0.0's composed codec
//! (`src/codec/distributed_codec.rs`); a change of its order there breaks this.
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use datafusion::common::{not_impl_err, Result};
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{AggregateUDF, ScalarUDF, WindowUDF};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::DistributedCodec;

use super::shared_rows::{holds_rows, ShareRows};
use datafusion_proto::physical_plan::{
    ComposedPhysicalExtensionCodec, DeduplicatingProtoConverter, PhysicalExtensionCodec,
    PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};

/// The functions every DataFusion session has: these travel by name.
pub struct Builtins {
    scalar: HashMap<String, Arc<ScalarUDF>>,
    aggregate: HashMap<String, Arc<AggregateUDF>>,
    window: HashMap<String, Arc<WindowUDF>>,
}

pub static BUILTINS: LazyLock<Builtins> = LazyLock::new(|| {
    let state = SessionStateBuilder::new().with_default_features().build();
    Builtins {
        scalar: state.scalar_functions().clone(),
        aggregate: state.aggregate_functions().clone(),
        window: state.window_functions().clone(),
    }
});

impl Builtins {
    /// Whether `f` is DataFusion's own function of its name. A user's function registered
    /// under a built-in's name (a Python `upper`) is not: it must travel with its code, or
    /// workers would run the built-in.
    pub fn has_scalar(&self, f: &ScalarUDF) -> bool {
        self.scalar.get(f.name()).is_some_and(|b| **b == *f)
    }

    pub fn has_aggregate(&self, f: &AggregateUDF) -> bool {
        self.aggregate.get(f.name()).is_some_and(|b| **b == *f)
    }

    pub fn has_window(&self, f: &WindowUDF) -> bool {
        self.window.get(f.name()).is_some_and(|b| **b == *f)
    }
}

#[derive(Debug)]
struct DistributedNodes;

fn by_name(builtin: bool, name: &str) -> Result<()> {
    match builtin {
        true => Ok(()),
        false => not_impl_err!("{name} is not built in: the session codec encodes it"),
    }
}

impl PhysicalExtensionCodec for DistributedNodes {
    forward_node_codec!(|_this| DistributedCodec);

    fn try_encode_udf(&self, node: &ScalarUDF, _buf: &mut Vec<u8>) -> Result<()> {
        by_name(BUILTINS.has_scalar(node), node.name())
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, _buf: &mut Vec<u8>) -> Result<()> {
        by_name(BUILTINS.has_aggregate(node), node.name())
    }

    fn try_encode_udwf(&self, node: &WindowUDF, _buf: &mut Vec<u8>) -> Result<()> {
        by_name(BUILTINS.has_window(node), node.name())
    }
}

/// The codec chain for plan fragments: `Composed[DistributedNodes, session codec]`, plus window
/// functions, which `ComposedPhysicalExtensionCodec` does not handle: they travel by name and
/// are resolved by the session codec (which remembers their payloads) in this process, and on
/// worker processes from the query's window-function header (see `window_functions`).
#[derive(Debug)]
pub struct FragmentCodec {
    composed: ComposedPhysicalExtensionCodec,
    session: Arc<dyn PhysicalExtensionCodec>,
}

pub fn fragment_codec(session: Arc<dyn PhysicalExtensionCodec>) -> FragmentCodec {
    FragmentCodec {
        composed: ComposedPhysicalExtensionCodec::new(vec![
            Arc::new(DistributedNodes),
            Arc::clone(&session),
        ]),
        session,
    }
}

impl PhysicalExtensionCodec for FragmentCodec {
    forward_node_codec!(|this| this.composed);

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        self.composed.try_decode_udf(name, buf)
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.composed.try_encode_udf(node, buf)
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        self.composed.try_decode_udaf(name, buf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.composed.try_encode_udaf(node, buf)
    }

    fn try_decode_udwf(&self, name: &str, _buf: &[u8]) -> Result<Arc<WindowUDF>> {
        self.session.try_decode_udwf(name, &[])
    }
}

pub fn encode_fragment(plan: Arc<dyn ExecutionPlan>, codec: &FragmentCodec) -> Result<Vec<u8>> {
    // Into a buffer of the message's exact size: datafusion-proto's `physical_plan_to_bytes`
    // grows its buffer as it writes, copying a plan that carries rows (an in-memory table, a
    // join's build side run first) several times over.
    let proto = DeduplicatingProtoConverter::default().execution_plan_to_proto(&plan, codec)?;
    Ok(prost::Message::encode_to_vec(&proto))
}

/// A private copy of `plan` for an in-process task: the same round trip a worker process's
/// fragment makes (fresh run state, dynamic filters linked within the copy), through the
/// protobuf messages but without writing and parsing their bytes; the rows it holds are
/// shared, not copied (`shared_rows`). Also the bytes its messages would take.
pub fn copy_fragment(
    plan: &Arc<dyn ExecutionPlan>,
    ctx: &TaskContext,
    codec: &FragmentCodec,
) -> Result<(Arc<dyn ExecutionPlan>, usize)> {
    let decode_ctx = PhysicalPlanDecodeContext::new(ctx, codec);
    if !holds_rows(plan) {
        let converter = DeduplicatingProtoConverter::default();
        let proto = converter.execution_plan_to_proto(plan, codec)?;
        let copy = converter.proto_to_execution_plan(&proto, &decode_ctx)?;
        return Ok((copy, prost::Message::encoded_len(&proto)));
    }
    let converter = ShareRows::default();
    let proto = converter.execution_plan_to_proto(plan, codec)?;
    let copy = converter.proto_to_execution_plan(&proto, &decode_ctx)?;
    let bytes = prost::Message::encoded_len(&proto) + converter.shared_bytes();
    Ok((copy, bytes))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature};

    use super::*;

    #[derive(Debug, PartialEq, Eq, Hash)]
    struct MyUpper(Signature);

    impl ScalarUDFImpl for MyUpper {
        fn name(&self) -> &str {
            "upper"
        }
        fn signature(&self) -> &Signature {
            &self.0
        }
        fn return_type(&self, _: &[DataType]) -> Result<DataType> {
            Ok(DataType::Utf8)
        }
        fn invoke_with_args(&self, _: ScalarFunctionArgs) -> Result<ColumnarValue> {
            unimplemented!()
        }
    }

    #[test]
    fn only_datafusions_own_function_travels_by_name() {
        let builtin = datafusion::functions::string::upper();
        assert!(BUILTINS.has_scalar(&builtin));
        let users = ScalarUDF::new_from_impl(MyUpper(Signature::any(
            1,
            datafusion::logical_expr::Volatility::Immutable,
        )));
        assert_eq!(users.name(), "upper");
        assert!(!BUILTINS.has_scalar(&users));
        assert!(DistributedNodes
            .try_encode_udf(&users, &mut vec![])
            .is_err());
        assert!(DistributedNodes
            .try_encode_udf(&builtin, &mut vec![])
            .is_ok());
    }
}
