//! A small kept table held whole by one worker.
//!
//! A kept table's parts are held where the tasks that made them ran: on a cluster of two,
//! half on each. Every follow-up over it then reads on both, and its aggregate or join
//! shuffles between them: stages, round trips and a second task to wait for, which cost more
//! than the rows of a small table. So once a table (or an insert's rows) is made, when it
//! holds at most `distributed.hold_whole_below` bytes, its parts move to the worker holding
//! most of them; the planner then sizes its scans at one task, and a follow-up is one stage
//! run where the rows are. Its lineage still makes it again if that worker is lost.
//!
//! The move is one run of our own ([`move_plan`], run by `kept_table::hold_whole`): the other
//! holders read their parts (a stage of one task each), and one task on the chosen worker
//! keeps what they send; then the other holders free theirs. A move that fails leaves the
//! parts where they were: it only costs speed.
use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::NetworkCoalesceExec;
use url::Url;
use uuid::Uuid;

use crate::kept::{KeepExec, KeptPart, KeptScanExec, Op};

/// `distributed.hold_whole_below`: the most bytes of a kept table (or of an insert's rows
/// into one held whole) moved to a single worker; 0 never moves.
pub const HOLD_WHOLE_BELOW: &str = "distributed.hold_whole_below";

/// The default: a table this size is read by one worker's cores in tens of milliseconds,
/// less than what a second task and a shuffle cost its follow-ups.
const DEFAULT_HOLD_WHOLE_BELOW: u64 = 128 << 20;

/// The task numbers of parts moved onto one worker start here (clear of the runs that send
/// an in-memory table, `i << 16`, and of parts moved from the coordinator, `1 << 24`).
const WHOLE: u32 = 1 << 28;

/// The limit `options` set (`HOLD_WHOLE_BELOW`), or the default.
pub fn hold_whole_below(options: &HashMap<String, String>) -> Result<u64> {
    match options.get(HOLD_WHOLE_BELOW) {
        None => Ok(DEFAULT_HOLD_WHOLE_BELOW),
        Some(v) => super::adaptive_joins::parse(HOLD_WHOLE_BELOW, v),
    }
}

/// The worker to hold `parts` whole, if they should be: `prefer` when given (the holder of
/// the table an insert joins), else the one holding most of their bytes; None when they are
/// held by one already, are over `limit` bytes (`extra` more are held there already), or some
/// are the coordinator's.
pub fn whole_on(
    parts: &[KeptPart],
    limit: u64,
    extra: u64,
    prefer: Option<&str>,
) -> Option<String> {
    let bytes: u64 = parts.iter().map(|p| p.bytes).sum();
    if limit == 0 || bytes + extra > limit || parts.iter().any(|p| p.holder.is_none()) {
        return None;
    }
    let mut by_holder: Vec<(&str, u64)> = Vec::new();
    for p in parts {
        let h = p.holder.as_deref().unwrap_or_default();
        match by_holder.iter_mut().find(|(x, _)| *x == h) {
            Some((_, b)) => *b += p.bytes,
            None => by_holder.push((h, p.bytes)),
        }
    }
    let target = match prefer {
        Some(p) => p,
        // The first of the largest, so that the choice does not depend on the order.
        None => {
            by_holder
                .iter()
                .max_by_key(|(h, b)| (*b, std::cmp::Reverse(*h)))?
                .0
        }
    };
    let elsewhere = by_holder.iter().any(|(h, _)| *h != target);
    elsewhere.then(|| target.to_string())
}

/// A move onto one worker: the plan, the parts that stay where they are (on that worker),
/// and the other holders (to free theirs once the plan has run).
pub struct Move {
    pub plan: Arc<dyn ExecutionPlan>,
    pub stay: Vec<KeptPart>,
    pub sources: Vec<Url>,
}

/// The move of the `parts` of store `store` (rows of `schema`) that `target` does not hold
/// onto it: one task on each other holder reads its parts (`scan::scale_up`), one on `target`
/// keeps what they send.
pub fn move_plan(
    (store, schema): (Uuid, SchemaRef),
    parts: &[KeptPart],
    target: &str,
) -> Result<Move> {
    let (stay, from): (Vec<KeptPart>, Vec<KeptPart>) = parts
        .iter()
        .cloned()
        .partition(|p| p.holder.as_deref() == Some(target));
    let mut sources: Vec<String> = from.iter().filter_map(|p| p.holder.clone()).collect();
    sources.sort();
    sources.dedup();
    let read = KeptScanExec::new(store, String::new(), Op::Read, schema, None, from)?;
    let sent = NetworkCoalesceExec::try_new(Arc::new(read), sources.len(), 1)?;
    let target = Url::parse(target).map_err(|e| DataFusionError::External(Box::new(e)))?;
    let keep = KeepExec::new(Arc::new(sent), store, WHOLE, vec![target], None);
    let kept = NetworkCoalesceExec::try_new(Arc::new(keep), 1, 1)?;
    let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(Arc::new(kept)));
    let sources = sources.iter().filter_map(|s| Url::parse(s).ok()).collect();
    Ok(Move {
        plan,
        stay,
        sources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(holder: &str, bytes: u64) -> KeptPart {
        KeptPart {
            task: 0,
            partition: 0,
            rows: 1,
            bytes,
            on_disk: false,
            process: String::new(),
            holder: Some(holder.into()),
            store: None,
        }
    }

    #[test]
    fn a_small_table_goes_whole_to_its_largest_holder() {
        let parts = [
            part("http://a/", 10),
            part("http://b/", 30),
            part("http://a/", 5),
        ];
        assert_eq!(whole_on(&parts, 100, 0, None).as_deref(), Some("http://b/"));
        // An insert's rows go where the table is held.
        assert_eq!(
            whole_on(&parts, 100, 0, Some("http://a/")).as_deref(),
            Some("http://a/")
        );
    }

    #[test]
    fn a_table_held_by_one_or_too_big_or_with_coordinator_rows_stays() {
        let one = [part("http://a/", 10), part("http://a/", 10)];
        assert_eq!(whole_on(&one, 100, 0, None), None);
        let two = [part("http://a/", 60), part("http://b/", 50)];
        assert_eq!(whole_on(&two, 100, 0, None), None);
        // What the chosen worker holds already counts.
        assert_eq!(whole_on(&two, 200, 100, None), None);
        assert_eq!(whole_on(&two, 0, 0, None), None, "0 never moves");
        let mut whole = two.to_vec();
        whole[1].holder = None;
        assert_eq!(whole_on(&whole, 1000, 0, None), None);
    }

    #[test]
    fn the_limit_is_read_from_the_options() {
        let mut options = HashMap::new();
        assert_eq!(
            hold_whole_below(&options).unwrap(),
            DEFAULT_HOLD_WHOLE_BELOW
        );
        options.insert(HOLD_WHOLE_BELOW.to_string(), "0".to_string());
        assert_eq!(hold_whole_below(&options).unwrap(), 0);
        options.insert(HOLD_WHOLE_BELOW.to_string(), "lots".to_string());
        let err = hold_whole_below(&options).unwrap_err().to_string();
        assert!(err.contains(HOLD_WHOLE_BELOW), "{err}");
    }
}
