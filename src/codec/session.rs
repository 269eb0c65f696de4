//! The session's own codec, imported over FFI from datafusion-python, and what we add to it.
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::config::{ConfigOptions, Extensions};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SessionStateBuilder, TaskContext};
use datafusion::logical_expr::{
    AggregateUDF, ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, WindowUDF,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};

use super::{our_nodes, window_topn};
use datafusion_ffi::execution::FFI_TaskContextProvider;
use datafusion_ffi::udaf::ForeignAggregateUDF;
use datafusion_ffi::udf::ForeignScalarUDF;

/// The session's own codec (imported over FFI), wrapped for three reasons.
///
/// * A foreign scalar UDF receives the session's `ConfigOptions` over FFI as strings, and
///   DataFusion 55's FFI sends extension entries (`distributed.*`) among the base options,
///   which the receiving side cannot parse. The UDF never needs our extensions, so it gets the
///   options without them.
/// * A function decoded from a payload (a cloudpickled Python UDF) is re-encoded for workers
///   with the very same payload: handing it back over FFI to be encoded again loses its
///   Python identity for some kinds (window functions).
/// * What DataFusion's encoding leaves out travels beside the plan: a compressed file scan's
///   compression (`scan_compression`), and a marker to restore function results' field
///   metadata on decoding (`field_metadata`); and our own node that merges a task's
///   partitions for its file sink (`task_merge`).
///
/// A function no codec serialises (one of an extension package, reached over FFI) travels by
/// name and is looked up among the session's own functions (`SessionFunctions`: the user's
/// session on the coordinator, the one its setup filled on a worker). The names so resolved are
/// remembered, so the coordinator can check that every worker has them before a query runs.
///
/// On a worker that refuses pickled code, a function that arrives with a payload is looked up
/// by name among the worker's own functions (registered by its setup) instead, and refused
/// when it has none of that name: the payload is never unpickled.
#[derive(Debug)]
pub struct SessionCodec {
    inner: Arc<dyn PhysicalExtensionCodec>,
    payloads: Mutex<HashMap<(&'static str, String), Vec<u8>>>,
    /// The session's own functions, for those that travel by name.
    functions: Option<Arc<SessionFunctions>>,
    /// Set on workers that refuse pickled code (see the type's comment).
    refuse_pickled: bool,
    /// Functions decoded by name from `functions`: (kind, name).
    by_name: Mutex<BTreeSet<(&'static str, String)>>,
    /// A codec of this library installed on the session under this id (see `with_own`).
    own: Option<(&'static str, Arc<dyn PhysicalExtensionCodec>)>,
}

impl SessionCodec {
    pub fn new(inner: Arc<dyn PhysicalExtensionCodec>) -> Self {
        Self {
            inner,
            payloads: Mutex::default(),
            functions: None,
            refuse_pickled: false,
            by_name: Mutex::default(),
            own: None,
        }
    }

    /// This codec, decoding what `codec` (of this library, installed on the session under
    /// `id`) wrote itself: through the session's codec, each node would cross FFI twice, each
    /// crossing converting a whole task context.
    pub fn with_own(mut self, id: &'static str, codec: Arc<dyn PhysicalExtensionCodec>) -> Self {
        self.own = Some((id, codec));
        self
    }

    /// This codec, resolving functions that travel by name among `functions`.
    pub fn with_functions(mut self, functions: Arc<SessionFunctions>) -> Self {
        self.functions = Some(functions);
        self
    }

    /// This codec, never unpickling the code of a function: functions are taken from the
    /// session's own (see `with_functions`) by name instead (see the type's comment).
    pub fn refusing_pickled_code(mut self) -> Self {
        self.refuse_pickled = true;
        self
    }

    /// The functions decoded so far that travel by name: (kind, name), kind being
    /// "scalar", "aggregate" or "window".
    pub fn by_name(&self) -> Vec<(&'static str, String)> {
        let named = self.by_name.lock().expect("poisoned");
        named.iter().cloned().collect()
    }

    /// The session's own function `name`, if it has one.
    fn registered<F: Function>(&self, name: &str) -> Result<Option<Arc<F>>> {
        match &self.functions {
            Some(functions) => Ok(F::registered(&*functions.registry()?, name)),
            None => Ok(None),
        }
    }

    /// Decodes a function from its payload, remembering the payload. A payload this codec
    /// refuses is never decoded: the function is looked up by name among the worker's own,
    /// and refused naming it when there is none.
    fn decode<F: Function>(&self, name: &str, buf: &[u8]) -> Result<Arc<F>> {
        // Window functions come back by name (see `FragmentCodec`): use the payload seen.
        let mut remembered = Vec::new();
        let buf = match F::COMES_BACK_BY_NAME
            && buf.is_empty()
            && self.recall(F::KIND, name, &mut remembered)
        {
            true => remembered.as_slice(),
            false => buf,
        };
        if self.refuse_pickled && !buf.is_empty() {
            return self.registered::<F>(name)?.ok_or_else(|| {
                DataFusionError::Execution(format!(
                    "this worker refuses pickled Python code, and the query's {} {name:?} \
                     carries some: register {name:?} in the worker's setup (it then runs the \
                     worker's own function), or start the worker without --refuse-pickled-code",
                    F::KIND
                ))
            });
        }
        let decoded = match F::decode(self.inner.as_ref(), name, buf) {
            // Sent by name and not found where the plan is decoded: a DataFusion built-in is
            // ours to give (a session chain with extension codecs installed resolves no name),
            // any other is the session's own (an extension package's, registered over FFI).
            Err(e) if buf.is_empty() => match F::builtin(name) {
                Some(builtin) => builtin,
                None => {
                    let own = self.registered::<F>(name)?;
                    let own = own.ok_or_else(|| not_registered(F::NOUN, name, e))?;
                    let mut named = self.by_name.lock().expect("poisoned");
                    named.insert((F::NOUN, name.to_string()));
                    own
                }
            },
            decoded => decoded?,
        };
        self.remember(F::KIND, name, buf);
        Ok(decoded)
    }

    /// Encodes a function with the payload it was decoded from, if any (see the type). One
    /// of this library's own (a DataFusion built-in, resolved by name) travels by name: handed
    /// to the session's codec chain it could come back tagged by a codec that cannot decode it.
    fn encode<F: Function>(&self, name: &str, node: &F, buf: &mut Vec<u8>) -> Result<()> {
        match self.recall(F::KIND, name, buf) {
            true => Ok(()),
            false if F::is_ours(node) => Ok(()),
            false => F::encode(self.inner.as_ref(), node, buf),
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

/// The payload of datafusion-python's envelope of what the codec installed as `id` wrote:
/// `DFPYCHN`, version 1, the id's length (u32, little-endian), the id, the payload
/// (datafusion-python 55); None for any other bytes.
fn enveloped<'a>(buf: &'a [u8], id: &str) -> Option<&'a [u8]> {
    let rest = buf.strip_prefix(b"DFPYCHN\x01")?;
    let (len, rest) = rest.split_first_chunk::<4>()?;
    let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
    let (named, payload) = (rest.get(..len)?, rest.get(len..)?);
    (named == id.as_bytes()).then_some(payload)
}

impl PhysicalExtensionCodec for SessionCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if let Some(ours) = our_nodes::decode(buf, inputs, ctx) {
            return ours;
        }
        if let Some(topk) = window_topn::decode(buf, inputs, ctx, self, converter) {
            return topk;
        }
        if let Some((id, own)) = &self.own {
            if let Some(payload) = enveloped(buf, id) {
                return own.try_decode(payload, inputs, ctx, converter);
            }
        }
        self.inner.try_decode(buf, inputs, ctx, converter)
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(done) = our_nodes::encode(&node, buf) {
            return done;
        }
        match window_topn::encode(&node, buf, self, converter) {
            Some(done) => done,
            None => self.inner.try_encode(node, buf, converter),
        }
    }

    fn try_decode_udf(&self, name: &str, buf: &[u8]) -> Result<Arc<ScalarUDF>> {
        let udf = self.decode::<ScalarUDF>(name, buf)?;
        Ok(Arc::new(ScalarUDF::new_from_impl(WithoutExtensions(udf))))
    }

    fn try_encode_udf(&self, node: &ScalarUDF, buf: &mut Vec<u8>) -> Result<()> {
        match node.inner().downcast_ref::<WithoutExtensions>() {
            Some(wrapped) => self.encode(node.name(), wrapped.0.as_ref(), buf),
            None => self.encode(node.name(), node, buf),
        }
    }

    fn try_decode_udaf(&self, name: &str, buf: &[u8]) -> Result<Arc<AggregateUDF>> {
        self.decode(name, buf)
    }

    fn try_encode_udaf(&self, node: &AggregateUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.encode(node.name(), node, buf)
    }

    fn try_decode_udwf(&self, name: &str, buf: &[u8]) -> Result<Arc<WindowUDF>> {
        self.decode(name, buf)
    }

    fn try_encode_udwf(&self, node: &WindowUDF, buf: &mut Vec<u8>) -> Result<()> {
        self.encode(node.name(), node, buf)
    }
}

/// A function named by a plan that this session does not have: on a worker, the user's next
/// step is registering it there.
fn not_registered(noun: &str, name: &str, cause: DataFusionError) -> DataFusionError {
    DataFusionError::Execution(format!(
        "the {noun} function {name:?} is not registered here; register it in the worker's \
         setup (LocalCluster(functions=[\"<package>\"]), `datafusion-distributed-worker \
         --functions <package>`, or a setup that registers it) ({cause})",
        cause = cause.to_string().lines().next().unwrap_or_default()
    ))
}

/// The functions registered on a datafusion-python session, read over FFI when first needed:
/// converting a session's task context converts every function it has, a cost a plan of
/// built-ins and Python UDFs (which carry their code) never needs to pay.
pub struct SessionFunctions {
    provider: FFI_TaskContextProvider,
    read: OnceLock<std::result::Result<Arc<TaskContext>, String>>,
}

impl SessionFunctions {
    pub fn new(provider: FFI_TaskContextProvider) -> Self {
        Self {
            provider,
            read: OnceLock::new(),
        }
    }

    fn registry(&self) -> Result<Arc<TaskContext>> {
        let read = self.read.get_or_init(|| {
            Arc::<TaskContext>::try_from(&self.provider).map_err(|e| e.to_string())
        });
        read.clone().map_err(|e| {
            DataFusionError::Execution(format!("cannot read the session's functions: {e}"))
        })
    }

    /// The names of the session's functions that are not DataFusion built-ins.
    pub fn own_names(&self) -> Result<Vec<String>> {
        let registry = self.registry()?;
        let builtins = builtins();
        let mut names: BTreeSet<String> = BTreeSet::new();
        let mut add = |own: Vec<&String>, builtin: &dyn Fn(&str) -> bool| {
            names.extend(own.into_iter().filter(|n| !builtin(n)).cloned())
        };
        add(registry.scalar_functions().keys().collect(), &|n| {
            builtins.scalar_functions().contains_key(n)
        });
        add(registry.aggregate_functions().keys().collect(), &|n| {
            builtins.aggregate_functions().contains_key(n)
        });
        add(registry.window_functions().keys().collect(), &|n| {
            builtins.window_functions().contains_key(n)
        });
        Ok(names.into_iter().collect())
    }
}

impl std::fmt::Debug for SessionFunctions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionFunctions")
    }
}

/// What differs between scalar, aggregate and window functions for `SessionCodec`.
trait Function: Sized {
    const KIND: &'static str;
    /// As the user names the kind ("aggregate function").
    const NOUN: &'static str;
    /// Sent by name, to be resolved with the payload seen when decoding.
    const COMES_BACK_BY_NAME: bool;
    fn decode(codec: &dyn PhysicalExtensionCodec, name: &str, buf: &[u8]) -> Result<Arc<Self>>;
    fn encode(codec: &dyn PhysicalExtensionCodec, node: &Self, buf: &mut Vec<u8>) -> Result<()>;
    fn registered(registry: &TaskContext, name: &str) -> Option<Arc<Self>>;
    /// Implemented in this library (not a function of another one, reached over FFI).
    fn is_ours(node: &Self) -> bool;
    /// DataFusion's built-in function of this name, if there is one.
    fn builtin(name: &str) -> Option<Arc<Self>> {
        Self::registered(builtins(), name)
    }
}

/// DataFusion's built-in functions, as a task context: their registry here, and the context
/// of FFI tables that decode no expressions (`python::capsule::export_table`).
pub fn builtins() -> &'static Arc<TaskContext> {
    static BUILTINS: OnceLock<Arc<TaskContext>> = OnceLock::new();
    BUILTINS.get_or_init(|| {
        SessionStateBuilder::new()
            .with_default_features()
            .build()
            .task_ctx()
    })
}

macro_rules! function_kind {
    (
        $ty:ty,
        $kind:literal,
        $noun:literal,
        $by_name:literal,
        $decode:ident,
        $encode:ident,
        $registry:ident,
        $ours:expr
    ) => {
        impl Function for $ty {
            const KIND: &'static str = $kind;
            const NOUN: &'static str = $noun;
            const COMES_BACK_BY_NAME: bool = $by_name;
            fn decode(c: &dyn PhysicalExtensionCodec, name: &str, buf: &[u8]) -> Result<Arc<Self>> {
                c.$decode(name, buf)
            }
            fn encode(
                c: &dyn PhysicalExtensionCodec,
                node: &Self,
                buf: &mut Vec<u8>,
            ) -> Result<()> {
                c.$encode(node, buf)
            }
            fn registered(registry: &TaskContext, name: &str) -> Option<Arc<Self>> {
                registry.$registry().get(name).cloned()
            }
            fn is_ours(node: &Self) -> bool {
                $ours(node)
            }
        }
    };
}

function_kind!(
    ScalarUDF,
    "udf",
    "scalar",
    false,
    try_decode_udf,
    try_encode_udf,
    scalar_functions,
    |f: &ScalarUDF| f.inner().downcast_ref::<ForeignScalarUDF>().is_none()
);
function_kind!(
    AggregateUDF,
    "udaf",
    "aggregate",
    false,
    try_decode_udaf,
    try_encode_udaf,
    aggregate_functions,
    |f: &AggregateUDF| f.inner().downcast_ref::<ForeignAggregateUDF>().is_none()
);
function_kind!(
    WindowUDF,
    "udwf",
    "window",
    true,
    try_decode_udwf,
    try_encode_udwf,
    window_functions,
    // Window functions keep going through the session's codec (Python ones travel in a
    // request header besides).
    |_: &WindowUDF| false
);

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

#[cfg(test)]
mod tests {
    use super::enveloped;

    fn envelope(id: &str, payload: &[u8]) -> Vec<u8> {
        let mut buf = b"DFPYCHN\x01".to_vec();
        buf.extend_from_slice(&u32::try_from(id.len()).unwrap().to_le_bytes());
        buf.extend_from_slice(id.as_bytes());
        buf.extend_from_slice(payload);
        buf
    }

    #[test]
    fn reads_only_the_envelope_of_the_named_codec() {
        let buf = envelope("ours.v1", b"payload");
        assert_eq!(enveloped(&buf, "ours.v1"), Some(&b"payload"[..]));
        assert_eq!(enveloped(&buf, "ours.v2"), None);
        assert_eq!(enveloped(&envelope("theirs", b"ours.v1"), "ours.v1"), None);
        assert_eq!(enveloped(b"payload", "ours.v1"), None);
        // A length running past the end is not an envelope.
        assert_eq!(enveloped(&buf[..12], "ours.v1"), None);
    }
}
