//! Where the tasks of a stage touching kept data go: to the workers holding the parts it
//! reads, or, for a stage keeping rows, round-robin over the list its `KeepExec` names.
use std::sync::Arc;

use datafusion::common::{exec_datafusion_err, Result};
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{DistributedLeafExec, RouteTasksEvent, RouteTasksEventResponse};
use url::Url;

use super::keep::KeepExec;
use super::scan::KeptScanExec;

/// Sends each task of a stage reading kept parts to the worker that holds them, and each
/// task of a stage keeping rows (that reads none) round-robin over the keeping node's list;
/// `None` for every other stage (round-robin). A stage that does both goes where its parts
/// are read: its `KeepExec` then names the same worker as their holder.
pub fn route_tasks(ev: RouteTasksEvent) -> Option<Result<RouteTasksEventResponse>> {
    let mut pending = vec![ev.plan];
    let mut keeping = None;
    while let Some(node) = pending.pop() {
        if let Some(keep) = node.downcast_ref::<KeepExec>() {
            let urls = (0..ev.task_count).map(|t| keep.worker_of(t).cloned());
            keeping = Some(urls.collect::<Option<Vec<_>>>());
        }
        if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>() {
            if let Some(urls) = holders_of(leaf.variants()) {
                return Some(urls.map(RouteTasksEventResponse::new));
            }
            continue;
        }
        if node.is::<KeptScanExec>() {
            if let Some(urls) = holders_of(std::slice::from_ref(node)) {
                return Some(urls.map(RouteTasksEventResponse::new));
            }
            continue;
        }
        // Another stage's plan is routed on its own.
        if node.name().starts_with("Network") {
            continue;
        }
        pending.extend(node.children());
    }
    keeping
        .flatten()
        .map(|u| Ok(RouteTasksEventResponse::new(u)))
}

pub(super) fn holders_of(variants: &[Arc<dyn ExecutionPlan>]) -> Option<Result<Vec<Url>>> {
    let holder = |v: &Arc<dyn ExecutionPlan>| -> Option<Option<String>> {
        let scan = v.downcast_ref::<KeptScanExec>()?;
        Some(scan.parts.first().and_then(|p| p.holder.clone()))
    };
    let holders: Vec<Option<String>> = variants.iter().map(holder).collect::<Option<_>>()?;
    let urls = holders
        .into_iter()
        .map(|h| {
            let h = h.ok_or_else(|| exec_datafusion_err!("a kept part without a holder"))?;
            Url::parse(&h).map_err(|e| exec_datafusion_err!("a kept part's holder {h}: {e}"))
        })
        .collect();
    Some(urls)
}
