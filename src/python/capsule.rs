//! Reading and writing the PyCapsules of DataFusion's FFI.
use std::ffi::CString;
use std::sync::{Arc, LazyLock};

use std::collections::HashMap;

use datafusion::arrow::ffi_stream::FFI_ArrowArrayStream;
use datafusion::catalog::TableProvider;
use datafusion::execution::{TaskContext, TaskContextProvider};
use datafusion_ffi::execution::{FFI_TaskContext, FFI_TaskContextProvider};
use datafusion_ffi::proto::physical_extension_codec::FFI_PhysicalExtensionCodec;
use datafusion_ffi::table_provider::FFI_TableProvider;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods};

use super::errors::DistributedError;
use crate::codec::{SessionCodec, SessionFunctions};

/// Copies the FFI struct out of a capsule named `name`, checking the name so a wrong object
/// gives a TypeError instead of undefined behaviour. `obj` may be the capsule itself or an
/// object whose method `method` returns one.
pub fn import<T: Clone>(obj: &Bound<'_, PyAny>, method: &str, name: &str) -> PyResult<T> {
    let capsule = if obj.is_instance_of::<PyCapsule>() {
        obj.clone()
    } else {
        obj.call_method0(method)?
    };
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err(format!("{method}() did not return a PyCapsule")))?;
    let actual = capsule.name()?.map(|n| n.to_string_lossy().into_owned());
    if actual.as_deref() != Some(name) {
        return Err(PyTypeError::new_err(format!(
            "expected a PyCapsule named {name:?}, got {actual:?}"
        )));
    }
    // SAFETY: the name check above identifies the struct the capsule holds.
    let value: &T = unsafe { capsule.reference::<T>() };
    Ok(value.clone())
}

pub fn export<'py, T: 'static + Send>(
    py: Python<'py>,
    value: T,
    name: &str,
) -> PyResult<Bound<'py, PyCapsule>> {
    PyCapsule::new(
        py,
        value,
        Some(CString::new(name).expect("static capsule name")),
    )
}

/// `table` as datafusion-python's FFI table provider (`__datafusion_table_provider__`), for
/// `session`, on our runtime; `filters`: whether it takes filters pushed down to it.
pub fn export_table<'py>(
    py: Python<'py>,
    session: &Bound<'py, PyAny>,
    table: Arc<dyn TableProvider>,
    filters: bool,
) -> PyResult<Bound<'py, PyCapsule>> {
    // The FFI scan asks this provider for a task context at every scan, only to decode the
    // filters pushed down: a foreign one (the session's) is converted whole, every
    // registered function included, which costs more than a short query's own planning. A
    // table taking no filters gets one of this library, which crosses as it is.
    let task_ctx_provider: FFI_TaskContextProvider = if filters {
        import(
            session,
            "__datafusion_task_context_provider__",
            "datafusion_task_context_provider",
        )?
    } else {
        let local: Arc<dyn TaskContextProvider> = BUILTINS.clone();
        FFI_TaskContextProvider::from(&local)
    };
    let mut provider = FFI_TableProvider::new(
        Arc::clone(&table),
        filters,
        Some(crate::runtime::handle()),
        task_ctx_provider,
        None,
    );
    if !filters {
        super::ffi_scan::read_settings_only(&mut provider, &table);
    }
    export(py, provider, "datafusion_table_provider")
}

/// Hands out the task context of DataFusion's built-in functions (`codec::builtins`); one
/// for the whole process, as the FFI provider holds it weakly.
struct Builtins;

impl TaskContextProvider for Builtins {
    fn task_ctx(&self) -> Arc<TaskContext> {
        Arc::clone(crate::codec::builtins())
    }
}

static BUILTINS: LazyLock<Arc<Builtins>> = LazyLock::new(|| Arc::new(Builtins));

/// Imports a session's physical extension codec (`ctx.__datafusion_physical_extension_codec__()`
/// or the capsule itself), wrapped in our [`SessionCodec`].
pub fn import_session_codec(obj: &Bound<'_, PyAny>) -> PyResult<SessionCodec> {
    let ffi: FFI_PhysicalExtensionCodec = import(
        obj,
        "__datafusion_physical_extension_codec__",
        "datafusion_physical_extension_codec",
    )?;
    let foreign: Arc<dyn PhysicalExtensionCodec> = (&ffi).into();
    // Our leaves were written by our WireCodec installed on the session (the coordinator's
    // serialising twin): read back here, not through two FFI crossings.
    let wire = Arc::new(crate::codec::WireCodec::default());
    Ok(SessionCodec::new(foreign).with_own(crate::codec::WIRE_CODEC_ID, wire))
}

/// The functions registered on the datafusion-python `session` (read when first needed).
pub fn session_functions(session: &Bound<'_, PyAny>) -> PyResult<Arc<SessionFunctions>> {
    let provider: FFI_TaskContextProvider = import(
        session,
        "__datafusion_task_context_provider__",
        "datafusion_task_context_provider",
    )?;
    Ok(Arc::new(SessionFunctions::new(provider)))
}

/// The settings of a datafusion-python `SessionContext` as they are now (what
/// `information_schema.df_settings` lists), read through its task-context capsule.
///
/// Only the session's config is read, as the strings it sends (`ffi_settings`): converting
/// its whole task context would also convert every registered function. Read at each query,
/// so a `SET` made on the session directly applies to the next one.
pub fn session_settings(session: &Bound<'_, PyAny>) -> PyResult<HashMap<String, String>> {
    let provider: FFI_TaskContextProvider = import(
        session,
        "__datafusion_task_context_provider__",
        "datafusion_task_context_provider",
    )?;
    // SAFETY: function pointers of a provider the capsule name identified; each returned FFI
    // struct releases itself on drop.
    let task_ctx: Result<FFI_TaskContext, _> = unsafe { (provider.task_ctx)(&provider) }.into();
    let task_ctx = task_ctx.map_err(|e| {
        DistributedError::new_err(format!("cannot read the session's settings: {e}"))
    })?;
    let ffi_config = unsafe { (task_ctx.session_config)(&task_ctx) };
    Ok(super::ffi_settings::settings_of(&ffi_config))
}

/// The Arrow C stream of `obj` (anything with `__arrow_c_stream__`: a pyarrow table or
/// reader, a DataFrame), moved out of its capsule: zero-copy, the batches keep the exporter's
/// buffers alive.
pub fn import_stream(obj: &Bound<'_, PyAny>) -> PyResult<FFI_ArrowArrayStream> {
    let capsule = obj.call_method0("__arrow_c_stream__")?;
    let capsule = capsule.cast::<PyCapsule>()?.clone();
    let name = capsule.name()?.map(|n| n.to_string_lossy().into_owned());
    if name.as_deref() != Some("arrow_array_stream") {
        return Err(PyValueError::new_err("not an Arrow C stream"));
    }
    // SAFETY: the name identifies an ArrowArrayStream; the stream is moved out, and the
    // capsule's destructor then finds it released (empty).
    Ok(unsafe { FFI_ArrowArrayStream::from_raw(capsule.pointer() as *mut _) })
}
