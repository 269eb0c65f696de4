//! The FFI scan of this library's own table providers (kept tables, query results, in-memory
//! and reader tables), with only the calling session's settings read.
//!
//! datafusion-ffi 55's `scan_fn_wrapper` converts the calling session whole at every scan
//! (`ForeignSession::try_from`: every registered function, catalog and option crosses), which
//! cost about half a millisecond of a short query. The wrapper is compiled into this library
//! (the provider's side of the FFI), so for providers that take no filters (nothing to decode
//! with the session's functions) the `scan` entry is replaced here by one that reads the
//! session's config only. `clone` is replaced too: the crate's clone builds the struct afresh
//! and would put its own scan back.
//!
//! The struct fields are private in datafusion-ffi, so they are reached through mirrors of its
//! `#[repr(C)]` layouts at `=55.2.0` (pinned in Cargo.toml): sizes checked at compile time, and
//! each provider's private data checked when it is patched (else it keeps the crate's scan).
//! Upstream, a lazily converted `ForeignSession` would make this unneeded.
use std::ffi::c_void;
use std::sync::{Arc, LazyLock, OnceLock};

use async_ffi::{FfiFuture, FutureExt};
use datafusion::catalog::TableProvider;
use datafusion::execution::config::SessionConfig;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, SessionStateBuilder};
use datafusion_ffi::execution_plan::FFI_ExecutionPlan;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::proto::physical_extension_codec::FFI_PhysicalExtensionCodec;
use datafusion_ffi::session::config::FFI_SessionConfig;
use datafusion_ffi::table_provider::FFI_TableProvider;
use datafusion_ffi::util::{FFI_Option, FFI_Result};
use stabby::vec::Vec as SVec;
use tokio::runtime::Handle;

/// A function pointer this code never calls (only its size matters).
type Opaque = *const c_void;

/// `FFI_SessionRef` (datafusion-ffi 55.2.0, `session/mod.rs`), field for field.
#[repr(C)]
struct SessionRef {
    session_id: Opaque,
    config: unsafe extern "C" fn(&SessionRef) -> FFI_SessionConfig,
    catalog_list: Opaque,
    query_planner: Opaque,
    optimize: Opaque,
    create_physical_plan: Opaque,
    create_physical_expr: Opaque,
    scalar_functions: Opaque,
    aggregate_functions: Opaque,
    window_functions: Opaque,
    table_options: Opaque,
    default_table_options: Opaque,
    task_ctx: Opaque,
    physical_optimizers: Opaque,
    logical_codec: FFI_LogicalExtensionCodec,
    physical_codec: FFI_PhysicalExtensionCodec,
    clone: Opaque,
    release: unsafe extern "C" fn(&mut SessionRef),
    version: unsafe extern "C" fn() -> u64,
    private_data: *mut c_void,
    library_marker_id: extern "C" fn() -> usize,
}

// Passed by value, the session is the callee's to release, as the crate's `Drop` does (the
// codecs release themselves after).
impl Drop for SessionRef {
    fn drop(&mut self) {
        unsafe { (self.release)(self) }
    }
}

type ScanFn = unsafe extern "C" fn(
    provider: &FFI_TableProvider,
    session: SessionRef,
    projections: FFI_Option<SVec<usize>>,
    filters_serialized: SVec<u8>,
    limit: FFI_Option<usize>,
) -> FfiFuture<FFI_Result<FFI_ExecutionPlan>>;

type CloneFn = unsafe extern "C" fn(provider: &FFI_TableProvider) -> FFI_TableProvider;

/// `FFI_TableProvider` (datafusion-ffi 55.2.0, `table_provider.rs`), field for field.
#[repr(C)]
struct ProviderFields {
    schema: Opaque,
    scan: ScanFn,
    table_type: Opaque,
    supports_filters_pushdown: Opaque,
    insert_into: Opaque,
    statistics: Opaque,
    logical_codec: FFI_LogicalExtensionCodec,
    clone: CloneFn,
    release: Opaque,
    version: Opaque,
    private_data: *mut c_void,
    library_marker_id: Opaque,
}

const _: () =
    assert!(std::mem::size_of::<ProviderFields>() == std::mem::size_of::<FFI_TableProvider>());
const _: () =
    assert!(std::mem::align_of::<ProviderFields>() == std::mem::align_of::<FFI_TableProvider>());

/// The crate's `ProviderPrivateData`, declared alike.
struct ProviderData {
    provider: Arc<dyn TableProvider>,
    #[allow(dead_code)] // read by the crate's own functions
    runtime: Option<Handle>,
}

/// The crate's own `scan` and `clone`, read from the first provider patched.
static CRATE_FNS: OnceLock<(ScanFn, CloneFn)> = OnceLock::new();

/// What each scan's session is cloned from: no functions or catalogs registered, so a clone
/// costs next to nothing; the caller's settings are put on it.
static BASE_STATE: LazyLock<SessionState> = LazyLock::new(|| {
    SessionStateBuilder::new()
        .with_runtime_env(Arc::new(RuntimeEnv::default()))
        .build()
});

/// Makes `provider` (just made by `FFI_TableProvider::new` over `table`, taking no filters)
/// scan with the caller's settings only. Left as it is when its private data does not read
/// back as `table` (a layout this code does not know).
pub fn read_settings_only(provider: &mut FFI_TableProvider, table: &Arc<dyn TableProvider>) {
    // SAFETY: `ProviderFields` has the provider's size and alignment (checked above) and
    // its field order; the private data is checked to be `table` before anything is changed.
    unsafe {
        let fields = &mut *(provider as *mut FFI_TableProvider as *mut ProviderFields);
        let data = &*(fields.private_data as *const ProviderData);
        if !std::ptr::addr_eq(Arc::as_ptr(&data.provider), Arc::as_ptr(table)) {
            log::debug!("datafusion-ffi's provider layout is not the one known: its scan kept");
            return;
        }
        CRATE_FNS.get_or_init(|| (fields.scan, fields.clone));
        fields.scan = scan_with_settings;
        fields.clone = clone_patched;
    }
}

unsafe extern "C" fn clone_patched(provider: &FFI_TableProvider) -> FFI_TableProvider {
    let (_, crate_clone) = *CRATE_FNS.get().expect("set when patched");
    unsafe {
        let mut copy = crate_clone(provider);
        let fields = &mut *(&mut copy as *mut FFI_TableProvider as *mut ProviderFields);
        fields.scan = scan_with_settings;
        fields.clone = clone_patched;
        copy
    }
}

unsafe extern "C" fn scan_with_settings(
    provider: &FFI_TableProvider,
    session: SessionRef,
    projections: FFI_Option<SVec<usize>>,
    filters_serialized: SVec<u8>,
    limit: FFI_Option<usize>,
) -> FfiFuture<FFI_Result<FFI_ExecutionPlan>> {
    if !filters_serialized.is_empty() {
        // Never asked of a provider taking no filters; the crate's scan decodes them.
        let (crate_scan, _) = *CRATE_FNS.get().expect("set when patched");
        return unsafe { crate_scan(provider, session, projections, filters_serialized, limit) };
    }
    // SAFETY: only providers patched by `read_settings_only` (private data checked) get here.
    let table = unsafe {
        let fields = &*(provider as *const FFI_TableProvider as *const ProviderFields);
        Arc::clone(&(*(fields.private_data as *const ProviderData)).provider)
    };
    let config = {
        let ffi_config = unsafe { (session.config)(&session) };
        SessionConfig::try_from(&ffi_config)
    };
    drop(session); // read: the caller's session is not touched again
    let projection: Option<Vec<usize>> =
        Option::from(projections).map(|p: SVec<usize>| p.into_iter().collect());
    let limit: Option<usize> = limit.into();
    async move {
        let mut state = BASE_STATE.clone();
        *state.config_mut() = match config {
            Ok(config) => config,
            Err(e) => return FFI_Result::Err(e.to_string().as_str().into()),
        };
        match table.scan(&state, projection.as_ref(), &[], limit).await {
            Ok(plan) => {
                FFI_Result::Ok(FFI_ExecutionPlan::new(plan, Some(crate::runtime::handle())))
            }
            Err(e) => FFI_Result::Err(e.to_string().as_str().into()),
        }
    }
    .into_ffi()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    use async_trait::async_trait;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use datafusion::catalog::Session;
    use datafusion::common::Result;
    use datafusion::datasource::{MemTable, TableType};
    use datafusion::execution::{TaskContext, TaskContextProvider};
    use datafusion::logical_expr::Expr;
    use datafusion::physical_plan::{collect, ExecutionPlan};
    use datafusion::prelude::SessionContext;
    use datafusion_ffi::execution::FFI_TaskContextProvider;

    extern "C" fn another_library() -> usize {
        datafusion_ffi::get_library_marker_id() + 1
    }

    /// A memory table that notes the batch size of the session scanning it.
    #[derive(Debug)]
    struct Noting(MemTable, Mutex<Option<usize>>);

    #[async_trait]
    impl TableProvider for Noting {
        fn schema(&self) -> SchemaRef {
            self.0.schema()
        }
        fn table_type(&self) -> TableType {
            TableType::Base
        }
        async fn scan(
            &self,
            state: &dyn Session,
            projection: Option<&Vec<usize>>,
            filters: &[Expr],
            limit: Option<usize>,
        ) -> Result<Arc<dyn ExecutionPlan>> {
            *self.1.lock().unwrap() = Some(state.config().batch_size());
            self.0.scan(state, projection, filters, limit).await
        }
    }

    struct NoSession;

    impl TaskContextProvider for NoSession {
        fn task_ctx(&self) -> Arc<TaskContext> {
            Arc::new(TaskContext::default())
        }
    }

    /// A patched provider scanned as datafusion-python scans it: through the crate's foreign
    /// provider, which hands over a real `FFI_SessionRef` of the caller's session.
    #[tokio::test]
    async fn a_patched_provider_scans_with_the_callers_settings() {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
        )
        .unwrap();
        let rows = MemTable::try_new(schema, vec![vec![batch.clone()], vec![batch]]).unwrap();
        let noting = Arc::new(Noting(rows, Mutex::new(None)));
        let table: Arc<dyn TableProvider> = noting.clone();
        let no_session: Arc<dyn TaskContextProvider> = Arc::new(NoSession);
        let mut ffi = FFI_TableProvider::new(
            Arc::clone(&table),
            false,
            Some(crate::runtime::handle()),
            FFI_TaskContextProvider::from(&no_session),
            None,
        );
        read_settings_only(&mut ffi, &table);
        // As from another library: the crate's foreign provider (a clone) calls our scan.
        ffi.library_marker_id = another_library;
        let foreign: Arc<dyn TableProvider> = (&ffi).into();

        let caller = SessionContext::new();
        caller
            .sql("SET datafusion.execution.batch_size = 77")
            .await
            .unwrap();
        let plan = foreign
            .scan(&caller.state(), Some(&vec![0]), &[], None)
            .await
            .unwrap();
        let batches = collect(plan, caller.task_ctx()).await.unwrap();
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 6);
        assert_eq!(*noting.1.lock().unwrap(), Some(77));
        // A clone of the clone keeps the patched scan.
        let again: Arc<dyn TableProvider> = (&ffi.clone()).into();
        drop(again);
    }
}
