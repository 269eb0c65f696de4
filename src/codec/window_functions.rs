//! User-defined window functions on worker processes.
//!
//! datafusion-proto's `ComposedPhysicalExtensionCodec` (the chain workers decode fragments
//! with) never asks its codecs for window functions: a fragment names them, and a worker
//! resolves the name in its session's registry. So the coordinator sends the payloads of the
//! query's own window functions (cloudpickled Python `udwf`s) in a request header, and the
//! worker decodes them with its session codec (which may refuse pickled code) and registers
//! them on that query's session before the fragment is decoded.
use std::collections::BTreeMap;
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::logical_expr::WindowUDF;
use datafusion::physical_expr::window::{StandardWindowExpr, WindowExpr};
use datafusion::physical_plan::windows::{BoundedWindowAggExec, WindowAggExec, WindowUDFExpr};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::PhysicalExtensionCodec;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::fragment::BUILTINS;

/// The header carrying the query's own window functions to worker processes.
pub const WINDOW_FUNCTIONS_HEADER: &str = "x-dfdpy-window-functions";

/// The window functions of `plan` that are not DataFusion's own.
fn own_window_functions(plan: &Arc<dyn ExecutionPlan>) -> Result<Vec<Arc<WindowUDF>>> {
    let mut found = Vec::new();
    plan.apply(|node| {
        let exprs = window_exprs(node.as_ref()).unwrap_or_default();
        for expr in exprs {
            let udwf = expr
                .as_any()
                .downcast_ref::<StandardWindowExpr>()
                .and_then(|s| {
                    s.get_standard_func_expr()
                        .as_any()
                        .downcast_ref::<WindowUDFExpr>()
                });
            if let Some(f) = udwf.map(WindowUDFExpr::fun) {
                if !BUILTINS.has_window(f) {
                    found.push(Arc::clone(f));
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(found)
}

/// The header with the payloads of `plan`'s own window functions, encoded by `codec`; empty
/// when there are none.
pub fn to_headers(
    plan: &Arc<dyn ExecutionPlan>,
    codec: &dyn PhysicalExtensionCodec,
) -> Result<HeaderMap> {
    let mut payloads = BTreeMap::new();
    for f in own_window_functions(plan)? {
        let mut buf = Vec::new();
        codec.try_encode_udwf(&f, &mut buf)?;
        if !buf.is_empty() {
            payloads.insert(f.name().to_string(), URL_SAFE_NO_PAD.encode(buf));
        }
    }
    let mut headers = HeaderMap::new();
    if !payloads.is_empty() {
        let json = serde_json::to_vec(&payloads).expect("names and base64 are strings");
        let value =
            HeaderValue::from_str(&URL_SAFE_NO_PAD.encode(json)).expect("base64 is a header value");
        headers.insert(HeaderName::from_static(WINDOW_FUNCTIONS_HEADER), value);
    }
    Ok(headers)
}

/// Decodes the window functions named in `headers` with `codec` and registers them on
/// `state` (over a built-in of the same name, as registering on a session does).
pub fn register_from_headers(
    state: &mut SessionState,
    headers: &HeaderMap,
    codec: &dyn PhysicalExtensionCodec,
) -> Result<()> {
    let Some(value) = headers.get(WINDOW_FUNCTIONS_HEADER) else {
        return Ok(());
    };
    let malformed = |why: String| exec_datafusion_err!("malformed window-function header: {why}");
    let json = URL_SAFE_NO_PAD
        .decode(value.as_bytes())
        .map_err(|e| malformed(e.to_string()))?;
    let payloads: BTreeMap<String, String> =
        serde_json::from_slice(&json).map_err(|e| malformed(e.to_string()))?;
    for (name, payload) in payloads {
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|e| malformed(e.to_string()))?;
        state.register_udwf(codec.try_decode_udwf(&name, &payload)?)?;
    }
    Ok(())
}

/// The window expressions of `node`, if it is a window operator (either kind).
pub fn window_exprs(node: &dyn ExecutionPlan) -> Option<&[Arc<dyn WindowExpr>]> {
    if let Some(w) = node.downcast_ref::<WindowAggExec>() {
        Some(w.window_expr())
    } else {
        node.downcast_ref::<BoundedWindowAggExec>()
            .map(|w| w.window_expr())
    }
}
