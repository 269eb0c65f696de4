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
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::config::{ConfigOptions, Extensions};
use datafusion::common::{not_impl_err, Result};
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{
    AggregateUDF, ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, WindowUDF,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::DistributedCodec;
use datafusion_ffi::proto::physical_extension_codec::FFI_PhysicalExtensionCodec;
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_proto_converter, physical_plan_to_bytes_with_proto_converter,
};
use datafusion_proto::physical_plan::{
    ComposedPhysicalExtensionCodec, DeduplicatingProtoConverter, PhysicalExtensionCodec,
    PhysicalProtoConverterExtension,
};
use pyo3::prelude::*;

use crate::capsule;

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

/// The codec chain for plan fragments: `Composed[DistributedNodes, session codec]`, plus window
/// functions, which `ComposedPhysicalExtensionCodec` does not handle: they travel by name and
/// are resolved by the session codec (the user's session registry), as datafusion-python
/// itself does.
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
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.composed.try_decode(buf, inputs, ctx, converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        self.composed.try_encode(node, buf, converter)
    }

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

/// Imports a session's physical extension codec (`ctx.__datafusion_physical_extension_codec__()`).
pub fn import_session_codec(obj: &Bound<'_, PyAny>) -> PyResult<Arc<dyn PhysicalExtensionCodec>> {
    let ffi: FFI_PhysicalExtensionCodec = capsule::import(
        obj,
        "__datafusion_physical_extension_codec__",
        "datafusion_physical_extension_codec",
    )?;
    let foreign: Arc<dyn PhysicalExtensionCodec> = (&ffi).into();
    Ok(Arc::new(SessionCodec::new(foreign)))
}

pub fn encode_fragment(plan: Arc<dyn ExecutionPlan>, codec: &FragmentCodec) -> Result<Vec<u8>> {
    let converter = DeduplicatingProtoConverter::default();
    Ok(physical_plan_to_bytes_with_proto_converter(plan, codec, &converter)?.to_vec())
}

pub fn decode_fragment(
    bytes: &[u8],
    ctx: &TaskContext,
    codec: &FragmentCodec,
) -> Result<Arc<dyn ExecutionPlan>> {
    let converter = DeduplicatingProtoConverter::default();
    physical_plan_from_bytes_with_proto_converter(bytes, ctx, codec, &converter)
}

/// The session's own codec (imported over FFI), wrapped for two reasons.
///
/// * A foreign scalar UDF receives the session's `ConfigOptions` over FFI as strings, and
///   DataFusion 55's FFI sends extension entries (`distributed.*`) among the base options,
///   which the receiving side cannot parse. The UDF never needs our extensions, so it gets the
///   options without them.
/// * A function decoded from a payload (a cloudpickled Python UDF) is re-encoded for workers
///   with the very same payload: handing it back over FFI to be encoded again loses its
///   Python identity for some kinds (window functions).
#[derive(Debug)]
pub struct SessionCodec {
    inner: Arc<dyn PhysicalExtensionCodec>,
    payloads: Mutex<HashMap<(&'static str, String), Vec<u8>>>,
}

impl SessionCodec {
    pub fn new(inner: Arc<dyn PhysicalExtensionCodec>) -> Self {
        Self {
            inner,
            payloads: Mutex::default(),
        }
    }

    fn remember(&self, kind: &'static str, name: &str, buf: &[u8]) {
        if !buf.is_empty() {
            let mut payloads = self.payloads.lock().expect("poisoned");
            payloads.insert((kind, name.to_string()), buf.to_vec());
        }
    }

    fn recall(&self, kind: &'static str, name: &str, buf: &mut Vec<u8>) -> bool {
        let payloads = self.payloads.lock().expect("poisoned");
        match payloads.get(&(kind, name.to_string())) {
            Some(payload) => {
                buf.extend_from_slice(payload);
                true
            }
            None => false,
        }
    }
}

impl PhysicalExtensionCodec for SessionCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.inner.try_decode(buf, inputs, ctx, converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        self.inner.try_encode(node, buf, converter)
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        let udf = self.inner.try_decode_udf(name, buf)?;
        self.remember("udf", name, buf);
        Ok(Arc::new(ScalarUDF::new_from_impl(WithoutExtensions(udf))))
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        if self.recall("udf", node.name(), buf) {
            return Ok(());
        }
        match node.inner().downcast_ref::<WithoutExtensions>() {
            Some(wrapped) => self.inner.try_encode_udf(&wrapped.0, buf),
            None => self.inner.try_encode_udf(node, buf),
        }
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        let udaf = self.inner.try_decode_udaf(name, buf)?;
        self.remember("udaf", name, buf);
        Ok(udaf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        match self.recall("udaf", node.name(), buf) {
            true => Ok(()),
            false => self.inner.try_encode_udaf(node, buf),
        }
    }

    fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
        // Window functions come back by name (see `FragmentCodec`): use the payload seen.
        let mut remembered = Vec::new();
        let buf = match buf.is_empty() && self.recall("udwf", name, &mut remembered) {
            true => remembered.as_slice(),
            false => buf,
        };
        let udwf = self.inner.try_decode_udwf(name, buf)?;
        self.remember("udwf", name, buf);
        Ok(udwf)
    }

    fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
        match self.recall("udwf", node.name(), buf) {
            true => Ok(()),
            false => self.inner.try_encode_udwf(node, buf),
        }
    }
}

fn without_extensions(options: &ConfigOptions) -> Arc<ConfigOptions> {
    let mut options = options.clone();
    options.extensions = Extensions::new();
    Arc::new(options)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct WithoutExtensions(Arc<ScalarUDF>);

impl ScalarUDFImpl for WithoutExtensions {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn aliases(&self) -> &[String] {
        self.0.aliases()
    }

    fn signature(&self) -> &Signature {
        self.0.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.0.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.0.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.0.coerce_types(arg_types)
    }

    fn invoke_with_args(&self, mut args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        args.config_options = without_extensions(&args.config_options);
        self.0.invoke_with_args(args)
    }

    fn with_updated_config(&self, config: &ConfigOptions) -> Option<ScalarUDF> {
        let updated = self
            .0
            .inner()
            .with_updated_config(&without_extensions(config))?;
        Some(ScalarUDF::new_from_impl(WithoutExtensions(Arc::new(
            updated,
        ))))
    }
}
