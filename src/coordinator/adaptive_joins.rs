//! Joins planned from the sizes their inputs actually have.
//!
//! datafusion-python plans a hash join's strategy from statistics: a build side behind a filter
//! of unknown selectivity (`p_name LIKE '%green%'`) is guessed at a fifth of its input, so a
//! join whose build side turns out to be a hundred thousand keys is planned `Partitioned`, and
//! both sides are hash-shuffled. Single-node, a shuffle moves rows between threads; between
//! workers it sends the whole probe side (TPC-H q9 at SF10: all of lineitem) over the network.
//!
//! So before the query is cut into stages, each such join's build side runs first, on the
//! workers, as a query of its own, and is read up to the join's limit (`limit_for`: small
//! anyway, or a share of what the probe side would shuffle; at most
//! `distributed.adaptive_broadcast_bytes`):
//! - when it ends within that, the join becomes `CollectLeft` over those rows, which the
//!   distributed planner broadcasts to the probe side's tasks: the probe side is no longer
//!   shuffled, and its scan is pruned by the join's dynamic filter in its own stage, filled
//!   from the build rows that ran first;
//! - otherwise the read stops there and the join stays partitioned (the rows read are the
//!   price of knowing, at most the limit; a side that must finish its work before its first
//!   row, or whose estimate comes from its inputs' sizes alone, is not tried when its
//!   estimate is over).
//!
//! The side that ran first is read in a plan of its own: the nodes this process runs of it
//! are the gathering head (a merge), which holds no state the query's own run would reuse.
//!
//! Each decision, and the size it was made on, is shown by `explain` (see `Decision`).
//! `SET distributed.adaptive = false` plans as before. Upstream, datafusion-distributed's
//! join re-planning (#522) would do this at stage boundaries, as Spark's adaptive execution
//! does; this is the part that needs no change to its stages.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::{JoinType, Result};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::SessionState;
use datafusion::physical_optimizer::ensure_requirements::EnsureRequirements;
use datafusion::physical_optimizer::filter_pushdown::FilterPushdown;
use datafusion::physical_optimizer::output_requirements::OutputRequirements;
use datafusion::physical_optimizer::sanity_checker::SanityCheckPlan;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::coop::CooperativeExec;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::statistics::{StatisticsArgs, StatisticsContext};
use datafusion::physical_plan::ExecutionPlan;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::join_sides::below_shuffle;
use super::run_first::{run_first, Run};
use super::skewed_keys;
use crate::batches::rows_bytes;

/// `distributed.adaptive`: whether joins are planned from their inputs' real sizes.
pub const ADAPTIVE: &str = "distributed.adaptive";
/// `distributed.adaptive_broadcast_bytes`: the most bytes of build rows broadcast (each task
/// of the probe side holds them all).
pub const BROADCAST_BYTES: &str = "distributed.adaptive_broadcast_bytes";
/// `distributed.adaptive_skew_bytes`: the least bytes of a hot key's probe rows for its join
/// to be split (see `skewed_keys`).
pub const SKEW_BYTES: &str = "distributed.adaptive_skew_bytes";
/// The default cap of a broadcast.
const DEFAULT_BROADCAST_BYTES: usize = 64 * 1024 * 1024;
/// The default least size of a hot key's probe rows for a split: Spark's (its
/// `skewedPartitionThresholdInBytes`). A split costs every row of the join a salt and a
/// second key; below this, a partition holding a hot key does not run long enough for that
/// to pay (on a 2-core machine it never does: `benchmarks/skew.py`).
const DEFAULT_SKEW_BYTES: usize = 256 * 1024 * 1024;
/// Each probe task receives a broadcast build side whole and builds its hash table alone (a
/// partitioned join builds in every partition at once), and a side run first has travelled
/// twice more before (to the coordinator, then in the plan): on worker processes TPC-H q18 at
/// SF0.1 spent 263 ms of CPU broadcasting 150 K rows (7.8 MB) to a 600 K-row probe side, 189 ms
/// partitioned. So a build side is broadcast when its rows are at most this share of the rows
/// its probe side would shuffle...
const PROBE_SHARE: usize = 8;
/// ...or, beyond `SMALL_ROWS`, this share of its rows.
const PROBE_ROW_SHARE: usize = 16;
/// Up to this many rows a broadcast build side may be an eighth of its probe side; past it, a
/// sixteenth. Its hash table cannot spill: 1 M rows broadcast TPC-H q21's orders at SF1,
/// past a 120 MB worker's memory.
const SMALL_ROWS: usize = 256 * 1024;
/// A broadcast build side's bytes may be at most this share of its probe side's. Bytes are
/// what the network carries: run first and broadcast to T tasks, B bytes travel 1 + T times;
/// partitioned, (B + P) (T - 1) / T cross between workers. On two workers the broadcast
/// carries less while B < P / 5: TPC-H q16 at SF10 broadcasts 19 MB of `part` instead of
/// shuffling 128 MB of `partsupp` (an eighth, 16 MB, kept it partitioned; about 9% faster on
/// `LocalCluster(2)`, 14% on the embedded cluster). A side that must finish its work first
/// is not run first on a guess over an eighth (`Limit::for_guesses`).
const PROBE_BYTE_SHARE: usize = 5;
/// A build side this small is broadcast whatever its probe side's size: sending it costs
/// less than a stage boundary.
const TINY_BYTES: usize = 1024 * 1024;
const TINY_ROWS: usize = 16 * 1024;
/// A build side estimated at more than this share of its probe side's rows is not run first:
/// even an estimate several times too high leaves no broadcast that would pay.
const NO_GAIN_SHARE: usize = 4;

/// The settings of adaptive planning, read from (and removed from) a query's options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Adaptive {
    pub on: bool,
    pub broadcast_bytes: usize,
    pub skew_bytes: usize,
}

impl Default for Adaptive {
    fn default() -> Self {
        Self {
            on: true,
            broadcast_bytes: DEFAULT_BROADCAST_BYTES,
            skew_bytes: DEFAULT_SKEW_BYTES,
        }
    }
}

impl Adaptive {
    /// The settings in a query's options (ours, not the crate's: `apply_options` skips them).
    pub fn from_options(options: &HashMap<String, String>) -> Result<Self> {
        let mut adaptive = Self::default();
        if let Some(v) = options.get(ADAPTIVE) {
            adaptive.on = parse(ADAPTIVE, v)?;
        }
        if let Some(v) = options.get(BROADCAST_BYTES) {
            adaptive.broadcast_bytes = parse(BROADCAST_BYTES, v)?;
        }
        if let Some(v) = options.get(SKEW_BYTES) {
            adaptive.skew_bytes = parse(SKEW_BYTES, v)?;
        }
        Ok(adaptive)
    }
}

/// `value` of option `key`, or an error naming both.
pub(super) fn parse<T: std::str::FromStr>(key: &str, value: &str) -> Result<T> {
    value.trim().to_ascii_lowercase().parse().map_err(|_| {
        datafusion::common::DataFusionError::Configuration(format!(
            "invalid value {value:?} for {key}"
        ))
    })
}

/// The most a join broadcasts (see `limit_for`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limit {
    pub bytes: usize,
    pub rows: usize,
}

impl Limit {
    fn passed(&self, rows: usize, bytes: usize) -> bool {
        bytes > self.bytes || rows > self.rows
    }

    /// This limit as a guess of a side that must finish its work first is held to: its
    /// bytes an eighth of the probe side's (`PROBE_SHARE`), not a fifth. Such guesses are
    /// rough (TPC-H q10's orders with their customers at SF10: 37 MB guessed, over 130 MB
    /// real), and between an eighth and a fifth, running one first wasted its work.
    fn for_guesses(self, probe_bytes: usize) -> Limit {
        let eighth = (probe_bytes / PROBE_SHARE).max(TINY_BYTES);
        Limit {
            bytes: self.bytes.min(eighth),
            rows: self.rows,
        }
    }
}

/// What was decided for one join, and on what size: `explain` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The join's keys, as the plan shows them (`p_partkey@0 = l_partkey@1`).
    pub keys: String,
    pub made_on: MadeOn,
    /// The most it would broadcast.
    pub limit: Limit,
    /// The least bytes of a hot key's probe rows for a split.
    pub skew_bytes: usize,
}

/// The size a join's strategy was decided on.
#[derive(Clone, Debug, PartialEq)]
pub enum MadeOn {
    /// Its build side ran first and ended within the limit: broadcast.
    Whole { rows: usize, bytes: usize },
    /// Its build side ran first and passed the limit at `rows` and `bytes`: partitioned.
    Over { rows: usize, bytes: usize },
    /// Its build side must finish its work first and was estimated over the limit:
    /// partitioned, not run first.
    Estimate { bytes: usize },
    /// Its build side's estimate, made from its inputs' sizes with no filter to guess, was
    /// over the limit: partitioned, not run first.
    Sized { rows: usize, bytes: usize },
    /// Its build side's estimate was too close to its probe side's for a broadcast to pay:
    /// partitioned, not run first.
    NoGain { rows: usize, probe_rows: usize },
    /// Left partitioned, its probe side's sample found these keys hot: split `ways` ways.
    Skewed { hot: skewed_keys::Hot, ways: usize },
    /// Its probe side's sample found these keys hot, their rows estimated at `bytes`: under
    /// the least a split pays from, not split.
    SkewedSmall { hot: skewed_keys::Hot, bytes: usize },
}

impl Decision {
    /// Whether the join's plan changed (broadcast, or hot keys split).
    pub fn changes_plan(&self) -> bool {
        matches!(self.made_on, MadeOn::Whole { .. } | MadeOn::Skewed { .. })
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (keys, limit) = (&self.keys, self.limit);
        let (most_bytes, most_rows) = (limit.bytes, limit.rows);
        match &self.made_on {
            MadeOn::Skewed { hot, ways } => write!(
                f,
                "join on {keys}: skewed keys split {ways} ways: {} held {} of {} sampled probe \
                 rows; each of their probe rows goes to one of {ways} parts, their build rows \
                 to all",
                hot.shown(),
                hot.rows,
                hot.sampled
            ),
            MadeOn::SkewedSmall { hot, bytes } => write!(
                f,
                "join on {keys}: skewed keys not split: {} held {} of {} sampled probe rows, \
                 about {bytes} bytes of its probe side, under the {} a split pays from \
                 (distributed.adaptive_skew_bytes)",
                hot.shown(),
                hot.rows,
                hot.sampled,
                self.skew_bytes
            ),
            MadeOn::Whole { rows, bytes } => write!(
                f,
                "join on {keys}: broadcast; its build side ran first: {rows} rows, {bytes} \
                 bytes (at most {most_rows} rows, {most_bytes} bytes are broadcast)"
            ),
            &MadeOn::Over { rows, bytes } => {
                let passed = match bytes > most_bytes {
                    true => format!("{most_bytes} bytes"),
                    false => format!("{most_rows} rows"),
                };
                write!(
                    f,
                    "join on {keys}: partitioned; its build side ran first and passed {passed} \
                     after {rows} rows"
                )
            }
            MadeOn::Estimate { bytes } => write!(
                f,
                "join on {keys}: partitioned; its build side is estimated at {bytes} bytes, \
                 over the {most_bytes} it would broadcast, and must finish its work before its \
                 first row: it was not run first"
            ),
            &MadeOn::Sized { rows, bytes } => {
                let (estimate, most) = match rows > most_rows {
                    true => (format!("{rows} rows"), format!("{most_rows} rows")),
                    false => (format!("{bytes} bytes"), format!("{most_bytes} bytes")),
                };
                write!(
                    f,
                    "join on {keys}: partitioned; its build side is estimated at {estimate} \
                     from its inputs' sizes (no filter to guess), over the {most} it would \
                     broadcast: it was not run first"
                )
            }
            MadeOn::NoGain { rows, probe_rows } => write!(
                f,
                "join on {keys}: partitioned; its build side is estimated at {rows} rows, \
                 over 1/{NO_GAIN_SHARE} of its probe side's {probe_rows}: no broadcast would \
                 pay, and it was not run first"
            ),
        }
    }
}

/// `plan` with each partitioned hash join whose build side's size is a guess planned again
/// from that side's real size (see the module's doc), each one left partitioned with hot keys
/// in its probe side split (`skewed_keys`), and the decisions made. A plan the re-planning
/// cannot make whole again is returned as it was.
pub async fn plan_joins(
    plan: Arc<dyn ExecutionPlan>,
    state: &SessionState,
    adaptive: Adaptive,
    stall_timeout: Option<Duration>,
    workers: usize,
) -> Result<(Arc<dyn ExecutionPlan>, Vec<Decision>)> {
    if !worth_it(&plan, adaptive)? {
        return Ok((plan, Vec::new()));
    }
    let mut decisions = Vec::new();
    let run = Run {
        state,
        stall_timeout,
        workers,
    };
    let adapted = adapt(Arc::clone(&plan), &run, adaptive, &mut decisions).await?;
    if !decisions.iter().any(Decision::changes_plan) {
        return Ok((plan, decisions));
    }
    match settle(adapted, state.config_options()) {
        Ok(settled) => Ok((settled, decisions)),
        Err(e) => {
            log::warn!(
                "joins planned from their real sizes do not make a plan ({e}); planned as before"
            );
            Ok((plan, Vec::new()))
        }
    }
}

/// Whether `plan` has a join to decide from real sizes (checked before anything is set up).
pub fn worth_it(plan: &Arc<dyn ExecutionPlan>, adaptive: Adaptive) -> Result<bool> {
    use datafusion::common::tree_node::TreeNode;
    if !adaptive.on {
        return Ok(false);
    }
    plan.exists(|node| {
        Ok(node.downcast_ref::<HashJoinExec>().is_some_and(|join| {
            !matches!(candidate(join, adaptive), Candidate::No) || skewed_keys::splittable(join)
        }))
    })
}

/// Children first, so that a build side is run with its own joins already decided.
fn adapt<'a>(
    plan: Arc<dyn ExecutionPlan>,
    run: &'a Run<'a>,
    adaptive: Adaptive,
    decisions: &'a mut Vec<Decision>,
) -> BoxFuture<'a, Result<Arc<dyn ExecutionPlan>>> {
    async move {
        let mut children = Vec::new();
        for child in plan.children() {
            children.push(adapt(Arc::clone(child), run, adaptive, decisions).await?);
        }
        let plan = replace_children_if_necessary(plan, children)?;
        let Some(join) = plan.downcast_ref::<HashJoinExec>() else {
            return Ok(plan);
        };
        let decision = |made_on, limit| Decision {
            keys: keys_of(join),
            made_on,
            limit,
            skew_bytes: adaptive.skew_bytes,
        };
        let limit = match candidate(join, adaptive) {
            Candidate::No => return split_hot_keys(plan, run, adaptive, decisions).await,
            Candidate::FarOver { guess, limit } => {
                decisions.push(decision(MadeOn::Estimate { bytes: guess }, limit));
                return split_hot_keys(plan, run, adaptive, decisions).await;
            }
            Candidate::NoGain {
                rows,
                probe_rows,
                limit,
            } => {
                decisions.push(decision(MadeOn::NoGain { rows, probe_rows }, limit));
                return split_hot_keys(plan, run, adaptive, decisions).await;
            }
            Candidate::Sized { rows, bytes, limit } => {
                decisions.push(decision(MadeOn::Sized { rows, bytes }, limit));
                return split_hot_keys(plan, run, adaptive, decisions).await;
            }
            Candidate::RunFirst(limit) => limit,
        };
        let build = below_shuffle(join.left());
        match read_up_to(Arc::clone(build), run, limit).await? {
            Read::Over { rows, bytes } => {
                decisions.push(decision(MadeOn::Over { rows, bytes }, limit));
                split_hot_keys(plan, run, adaptive, decisions).await
            }
            Read::Whole(batches) => {
                let rows = batches.iter().map(|b| b.num_rows()).sum();
                let bytes = batches.iter().map(rows_bytes).sum();
                decisions.push(decision(MadeOn::Whole { rows, bytes }, limit));
                let rows_here = MemorySourceConfig::try_new_exec(&[batches], build.schema(), None)?;
                let probe = Arc::clone(below_shuffle(join.right()));
                join.builder()
                    .with_partition_mode(PartitionMode::CollectLeft)
                    .with_new_children(vec![rows_here, probe])?
                    .reset_state()
                    .build_exec()
            }
        }
    }
    .boxed()
}

/// `plan`, a join left partitioned, with the hot keys of its probe side split across its
/// tasks (`skewed_keys`) when its sample finds any.
async fn split_hot_keys(
    plan: Arc<dyn ExecutionPlan>,
    run: &Run<'_>,
    adaptive: Adaptive,
    decisions: &mut Vec<Decision>,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(join) = plan.downcast_ref::<HashJoinExec>() else {
        return Ok(plan);
    };
    if !skewed_keys::splittable(join) {
        return Ok(plan);
    }
    let target = run.state.config_options().execution.target_partitions;
    let partitions = skewed_keys::partitions(target, run.workers);
    let Some(hot) = skewed_keys::sample(join, run, partitions).await? else {
        return Ok(plan);
    };
    let (limit, _, probe_bytes) = limit_for(join, adaptive);
    let bytes = hot.share_of(probe_bytes);
    let least = adaptive.skew_bytes;
    let mut decision = |made_on| {
        decisions.push(Decision {
            keys: keys_of(join),
            made_on,
            limit,
            skew_bytes: least,
        })
    };
    if bytes < least {
        decision(MadeOn::SkewedSmall { hot, bytes });
        return Ok(plan);
    }
    let ways = skewed_keys::ways(partitions);
    let split = skewed_keys::split(join, &hot, ways)?;
    decision(MadeOn::Skewed { hot, ways });
    Ok(split)
}

/// What a join is to adaptive planning.
enum Candidate {
    /// Not one to decide: not partitioned, not broadcastable (its type emits build rows,
    /// which each task of a broadcast would emit again), or its build side's size is known.
    No,
    /// Its build side's size is a guess: it runs first, and is broadcast within this limit.
    RunFirst(Limit),
    /// Its build side must finish its work before its first row and is guessed over its
    /// limit: it stays partitioned without a run that would be wasted.
    FarOver { guess: usize, limit: Limit },
    /// Its build side's estimate, made from sizes alone, is over its limit.
    Sized {
        rows: usize,
        bytes: usize,
        limit: Limit,
    },
    /// Its build side is guessed too close to its probe side for a broadcast to pay.
    NoGain {
        rows: usize,
        probe_rows: usize,
        limit: Limit,
    },
}

fn candidate(join: &HashJoinExec, adaptive: Adaptive) -> Candidate {
    let broadcastable = matches!(
        join.join_type(),
        JoinType::Inner
            | JoinType::Right
            | JoinType::RightSemi
            | JoinType::RightAnti
            | JoinType::RightMark
    );
    if *join.partition_mode() != PartitionMode::Partitioned || !broadcastable || join.null_aware {
        return Candidate::No;
    }
    let build = below_shuffle(join.left());
    let Ok(stats) = StatisticsContext::new().compute(build.as_ref(), &StatisticsArgs::new()) else {
        return Candidate::No;
    };
    let rows = match stats.num_rows {
        Precision::Inexact(rows) => rows,
        // Known exactly, the static plan already had it; unknown, it could be anything.
        Precision::Exact(_) | Precision::Absent => return Candidate::No,
    };
    let guess = match stats.total_byte_size {
        Precision::Inexact(b) | Precision::Exact(b) => b,
        Precision::Absent => rows.saturating_mul(build.schema().fields().len().max(1) * 8),
    };
    let (limit, probe_rows, probe_bytes) = limit_for(join, adaptive);
    // Close to its probe side, a side is tried only when its estimate is a filter's guess
    // over rows it hands on as it reads them: DataFusion guesses a fifth of a filter's input
    // when it cannot tell (TPC-H q12's lineitem at SF10: 12 M rows guessed against orders'
    // 15 M, about 0.3 M real), and trying costs at most the limit's worth of its rows.
    let guessed = streams(build) && guesses_a_filter(build);
    if rows.saturating_mul(NO_GAIN_SHARE) > probe_rows && !guessed {
        return Candidate::NoGain {
            rows,
            probe_rows,
            limit,
        };
    }
    // An estimate made from sizes alone (no filter's selectivity guessed) is a near one:
    // over the limit, a run would only stop past it, its work wasted.
    if limit.passed(rows, guess) && from_sizes(build) {
        return Candidate::Sized {
            rows,
            bytes: guess,
            limit,
        };
    }
    // A streaming side costs at most the limit's worth of its rows to try, however wrong
    // its guess; one that must finish its work before its first row (an aggregate, a sort,
    // a partitioned join's build) costs that work, and its guess has the say, held to an
    // eighth of the probe side's bytes (see `PROBE_BYTE_SHARE`).
    let held = limit.for_guesses(probe_bytes);
    match streams(build) || guess <= held.bytes {
        true => Candidate::RunFirst(limit),
        false => Candidate::FarOver { guess, limit: held },
    }
}

/// The most `join` broadcasts: a share of what its probe side would shuffle (as estimated),
/// or what is tiny anyway, never over the cap in bytes; and the probe side's estimated rows
/// and bytes.
fn limit_for(join: &HashJoinExec, adaptive: Adaptive) -> (Limit, usize, usize) {
    let probe = below_shuffle(join.right());
    let stats = StatisticsContext::new().compute(probe.as_ref(), &StatisticsArgs::new());
    let (rows, bytes) = match stats {
        Ok(stats) => {
            let rows = stats.num_rows.get_value().copied().unwrap_or(usize::MAX);
            let width = probe.schema().fields().len().max(1) * 8;
            let bytes = match stats.total_byte_size.get_value() {
                Some(b) => *b,
                None => rows.saturating_mul(width),
            };
            (rows, bytes)
        }
        Err(_) => (usize::MAX, usize::MAX),
    };
    let limit = Limit {
        bytes: (bytes / PROBE_BYTE_SHARE)
            .max(TINY_BYTES)
            .min(adaptive.broadcast_bytes),
        rows: (rows / PROBE_ROW_SHARE)
            .max(SMALL_ROWS.min(rows / PROBE_SHARE))
            .max(TINY_ROWS),
    };
    (limit, rows, bytes)
}

/// Whether `plan` hands on rows as it reads them: scans, filters, projections, repartitions,
/// and joins probing a collected build side (their builds were planned small, or ran first).
fn streams(plan: &Arc<dyn ExecutionPlan>) -> bool {
    streams_here(plan) && plan.children().into_iter().all(streams)
}

/// Whether `plan` itself, its inputs aside, hands on rows as it reads them (see `streams`).
fn streams_here(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.is::<DataSourceExec>()
        || plan.is::<FilterExec>()
        || plan.is::<ProjectionExec>()
        || plan.is::<RepartitionExec>()
        || plan.is::<CoalescePartitionsExec>()
        || plan.is::<CooperativeExec>()
        || plan
            .downcast_ref::<HashJoinExec>()
            .is_some_and(|j| *j.partition_mode() == PartitionMode::CollectLeft)
}

/// Whether `plan`'s row estimate comes from its inputs' sizes alone: scans without a
/// predicate of their own (a dynamic filter prunes, it does not select), projections,
/// repartitions and joins probing a collected build side, and no filter, whose selectivity
/// DataFusion guesses (a fifth of its input when it cannot tell).
fn from_sizes(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let own = match plan.downcast_ref::<DataSourceExec>() {
        Some(scan) => scan
            .data_source()
            .downcast_ref::<FileScanConfig>()
            .is_none_or(|files| {
                files
                    .file_source()
                    .filter()
                    .is_none_or(|p| only_dynamic(&p))
            }),
        None => !plan.is::<FilterExec>() && streams_here(plan),
    };
    own && plan.children().into_iter().all(from_sizes)
}

/// Whether `plan` filters with a predicate whose selectivity DataFusion cannot work out from
/// column statistics (a `LIKE`, a comparison of two columns...) and so guesses.
fn guesses_a_filter(plan: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_expr::intervals::utils::check_support;
    let own = plan
        .downcast_ref::<FilterExec>()
        .is_some_and(|f| !check_support(f.predicate(), &f.input().schema()));
    own || plan.children().into_iter().any(guesses_a_filter)
}

/// Whether a scan's predicate is only dynamic filters (joined by AND).
fn only_dynamic(predicate: &Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> bool {
    use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
    datafusion::physical_expr::split_conjunction(predicate)
        .iter()
        .all(|p| p.is::<DynamicFilterPhysicalExpr>())
}

fn keys_of(join: &HashJoinExec) -> String {
    let keys: Vec<String> = join
        .on()
        .iter()
        .map(|(l, r)| format!("{l} = {r}"))
        .collect();
    keys.join(", ")
}

enum Read {
    Whole(Vec<RecordBatch>),
    /// It passed the limit at this many rows and bytes; the rest was not computed.
    Over {
        rows: usize,
        bytes: usize,
    },
}

/// Runs `plan` on the workers and reads its rows while they fit in `limit`.
async fn read_up_to(plan: Arc<dyn ExecutionPlan>, run: &Run<'_>, limit: Limit) -> Result<Read> {
    let (mut batches, mut rows, mut bytes) = (Vec::new(), 0, 0);
    let what = "a join's build side, run first to plan the join from its size";
    let ended = run_first(plan, run, what, |batch| {
        rows += batch.num_rows();
        bytes += rows_bytes(&batch);
        if batch.num_rows() > 0 {
            batches.push(batch);
        }
        Ok(!limit.passed(rows, bytes))
    })
    .await?;
    Ok(match ended {
        true => Read::Whole(batches),
        false => Read::Over { rows, bytes },
    })
}

/// The plan made whole again after joins changed their mode: the distribution and orderings
/// their parents need (a partitioned join's output was hash-partitioned, a collected one's is
/// its probe side's), the new joins' dynamic filters pushed to the scans they probe, and
/// DataFusion's own check of the result.
pub(super) fn settle(
    plan: Arc<dyn ExecutionPlan>,
    config: &ConfigOptions,
) -> Result<Arc<dyn ExecutionPlan>> {
    // The root's own ordering and distribution are requirements too (else a root sort-merge
    // looks unneeded): held above the plan meanwhile, as DataFusion's optimizer does.
    let plan = OutputRequirements::new_add_mode().optimize(plan, config)?;
    let plan = EnsureRequirements::new().optimize(plan, config)?;
    let plan = OutputRequirements::new_remove_mode().optimize(plan, config)?;
    let plan = FilterPushdown::new_post_optimization().optimize(plan, config)?;
    SanityCheckPlan::new().optimize(plan, config)
}

#[cfg(test)]
mod tests {
    use datafusion::physical_plan::displayable;
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::coordinator::test_sessions::partitioned_joins;

    /// Two tables of 2,000 rows; every join of more than 100 rows planned partitioned.
    async fn session() -> SessionContext {
        partitioned_joins(&[
            "CREATE TABLE facts AS SELECT value AS k, value % 7 AS v FROM generate_series(1, 2000)",
            "CREATE TABLE dims AS SELECT value AS k, concat('n', value % 100) AS name \
             FROM generate_series(1, 2000)",
        ])
        .await
    }

    async fn physical(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
        let df = ctx.sql(sql).await.unwrap();
        df.create_physical_plan().await.unwrap()
    }

    async fn join_of(ctx: &SessionContext, sql: &str) -> Arc<dyn ExecutionPlan> {
        let plan = physical(ctx, sql).await;
        let mut found = None;
        let mut pending = vec![plan];
        while let Some(node) = pending.pop() {
            if node.is::<HashJoinExec>() {
                found = Some(Arc::clone(&node));
            }
            pending.extend(node.children().into_iter().cloned());
        }
        found.expect("a hash join")
    }

    /// A join's build side, below its shuffle.
    fn build_of(join: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
        Arc::clone(below_shuffle(join.children()[0]))
    }

    fn decided(plan: &Arc<dyn ExecutionPlan>) -> Candidate {
        candidate(plan.downcast_ref().unwrap(), Adaptive::default())
    }

    #[test]
    fn options_are_read_and_a_bad_one_is_named() {
        let options = |entries: &[(&str, &str)]| {
            let pairs = entries.iter().map(|(k, v)| (k.to_string(), v.to_string()));
            Adaptive::from_options(&pairs.collect())
        };
        assert_eq!(options(&[]).unwrap(), Adaptive::default());
        let set = options(&[(ADAPTIVE, "FALSE"), (BROADCAST_BYTES, "1000")]).unwrap();
        assert_eq!((set.on, set.broadcast_bytes), (false, 1000));
        let bad = options(&[(ADAPTIVE, "sometimes")]).unwrap_err().to_string();
        assert!(
            bad.contains("distributed.adaptive") && bad.contains("sometimes"),
            "{bad}"
        );
    }

    #[tokio::test]
    async fn a_side_whose_size_is_a_guess_runs_first_and_a_known_one_does_not() {
        let ctx = session().await;
        let filtered = "SELECT v FROM facts JOIN dims ON facts.k = dims.k WHERE name LIKE 'n7%'";
        let join = join_of(&ctx, filtered).await;
        assert!(matches!(
            decided(&join),
            Candidate::RunFirst(Limit {
                bytes: TINY_BYTES,
                ..
            })
        ));
        let whole = join_of(&ctx, "SELECT v FROM facts JOIN dims ON facts.k = dims.k").await;
        assert!(matches!(decided(&whole), Candidate::No));
        // A LEFT join emits its build rows: a broadcast would emit them once per task.
        let left = "SELECT v FROM (SELECT * FROM dims WHERE name LIKE 'n7%') d \
                    LEFT JOIN facts ON facts.k = d.k";
        assert!(matches!(decided(&join_of(&ctx, left).await), Candidate::No));
    }

    #[tokio::test]
    async fn only_streaming_sides_are_tried_whatever_their_guess() {
        let ctx = session().await;
        let filtered = join_of(
            &ctx,
            "SELECT v FROM facts JOIN dims ON facts.k = dims.k WHERE name LIKE 'n7%'",
        )
        .await;
        assert!(streams(below_shuffle(filtered.children()[0])));
        let grouped = "SELECT v FROM facts JOIN (SELECT k, max(name) AS name FROM dims \
                       WHERE name LIKE 'n7%' GROUP BY k) d ON facts.k = d.k";
        let grouped = join_of(&ctx, grouped).await;
        assert!(!streams(below_shuffle(grouped.children()[0])));
        let tiny = Adaptive {
            broadcast_bytes: 10,
            ..Adaptive::default()
        };
        let join: &HashJoinExec = grouped.downcast_ref().unwrap();
        assert!(matches!(
            candidate(join, tiny),
            Candidate::FarOver {
                limit: Limit { bytes: 10, .. },
                ..
            }
        ));
    }

    #[test]
    fn a_run_may_broadcast_a_fifth_of_the_probe_bytes_a_guess_an_eighth() {
        // TPC-H q16 at SF10: 128 MB of partsupp would shuffle, 19 MB of parts broadcast.
        let probe_bytes = 128_000_000;
        let run = Limit {
            bytes: probe_bytes / PROBE_BYTE_SHARE,
            rows: 500_000,
        };
        assert!(!run.passed(296_824, 19_170_643));
        let held = run.for_guesses(probe_bytes);
        assert_eq!((held.bytes, held.rows), (16_000_000, 500_000));
        // TPC-H q10 at SF10: its orders with their customers guessed at 37 MB against 288 MB
        // of lineitem, under a fifth but over an eighth: not run first (it held 130 MB).
        let q10 = Limit {
            bytes: 288_000_000 / PROBE_BYTE_SHARE,
            rows: 500_000,
        };
        assert!(!q10.passed(0, 37_107_264));
        assert!(q10.for_guesses(288_000_000).passed(0, 37_107_264));
        // What is tiny anyway stays within both.
        let tiny = Limit {
            bytes: TINY_BYTES,
            rows: TINY_ROWS,
        };
        assert_eq!(tiny.for_guesses(1_000).bytes, TINY_BYTES);
    }

    #[tokio::test]
    async fn a_filters_guess_close_to_its_probe_side_is_tried_and_an_aggregates_is_not() {
        let ctx = session().await;
        // Both sides filtered: the build side's guess (a fifth of dims) is over a quarter of
        // the probe side's estimate (another fifth), and a guess.
        let filtered = "SELECT a.k FROM dims a JOIN dims b ON a.k = b.k \
                        WHERE a.name LIKE 'n7%' AND b.name LIKE 'n1%'";
        let join_arc = join_of(&ctx, filtered).await;
        let join: &HashJoinExec = join_arc.downcast_ref().unwrap();
        let build = below_shuffle(join.left());
        let rows = *StatisticsContext::new()
            .compute(build.as_ref(), &StatisticsArgs::new())
            .unwrap()
            .num_rows
            .get_value()
            .unwrap();
        let (_, probe_rows, _) = limit_for(join, Adaptive::default());
        assert!(rows * NO_GAIN_SHARE > probe_rows, "{rows} vs {probe_rows}");
        assert!(matches!(
            candidate(join, Adaptive::default()),
            Candidate::RunFirst(_)
        ));
        // A range is worked out from column statistics, not guessed.
        assert!(guesses_a_filter(&build_of(join_arc)));
        let ranged = "SELECT a.k FROM dims a JOIN dims b ON a.k = b.k WHERE a.k < 1500";
        let ranged = join_of(&ctx, ranged).await;
        let shown = displayable(ranged.as_ref()).indent(false).to_string();
        assert!(shown.contains("FilterExec: k@0 < 1500"), "{shown}");
        assert!(!guesses_a_filter(&ranged));
        // An aggregate's estimate as close is not tried: it would finish its work first.
        let grouped = "SELECT v FROM facts JOIN (SELECT k, max(name) AS name FROM dims \
                       GROUP BY k) d ON facts.k = d.k";
        assert!(matches!(
            decided(&join_of(&ctx, grouped).await),
            Candidate::NoGain { .. }
        ));
    }

    #[tokio::test]
    async fn only_a_side_without_a_guessed_filter_or_aggregate_is_estimated_from_sizes() {
        let ctx = session().await;
        let plain = "SELECT v FROM facts JOIN dims ON facts.k = dims.k";
        assert!(from_sizes(&build_of(join_of(&ctx, plain).await)));
        let filtered = "SELECT v FROM facts JOIN dims ON facts.k = dims.k WHERE name LIKE 'n7%'";
        assert!(!from_sizes(&build_of(join_of(&ctx, filtered).await)));
        let grouped = "SELECT v FROM facts JOIN (SELECT k, max(name) AS name FROM dims \
                       GROUP BY k) d ON facts.k = d.k";
        assert!(!from_sizes(&build_of(join_of(&ctx, grouped).await)));
    }

    #[tokio::test]
    async fn settling_keeps_what_the_root_needs() {
        let ctx = session().await;
        let sql = "SELECT name, sum(v) AS s FROM facts JOIN dims ON facts.k = dims.k \
                   WHERE name LIKE 'n7%' GROUP BY name ORDER BY name";
        let plan = physical(&ctx, sql).await;
        let settled = settle(Arc::clone(&plan), ctx.state().config_options()).unwrap();
        let shown = displayable(settled.as_ref()).indent(false).to_string();
        assert!(shown.starts_with("SortPreservingMergeExec"), "{shown}");
    }

    #[test]
    fn decisions_say_what_they_were_made_on() {
        let decision = |made_on| {
            Decision {
                keys: "k@0 = k@0".into(),
                made_on,
                limit: Limit {
                    bytes: 100,
                    rows: 50,
                },
                skew_bytes: 1000,
            }
            .to_string()
        };
        let cases = [
            (
                MadeOn::Whole { rows: 3, bytes: 24 },
                &["broadcast", "3 rows, 24 bytes"][..],
            ),
            (
                MadeOn::Over {
                    rows: 20,
                    bytes: 150,
                },
                &["partitioned", "passed 100 bytes"],
            ),
            (
                MadeOn::Over {
                    rows: 51,
                    bytes: 99,
                },
                &["passed 50 rows after 51 rows"],
            ),
            (
                MadeOn::Estimate { bytes: 5000 },
                &["estimated at 5000 bytes"],
            ),
            (
                MadeOn::Sized {
                    rows: 80,
                    bytes: 64,
                },
                &[
                    "estimated at 80 rows from its inputs' sizes",
                    "over the 50 rows",
                ],
            ),
            (
                MadeOn::Sized {
                    rows: 8,
                    bytes: 640,
                },
                &["estimated at 640 bytes", "over the 100 bytes"],
            ),
            (
                MadeOn::NoGain {
                    rows: 30,
                    probe_rows: 100,
                },
                &["30 rows", "100"],
            ),
        ];
        for (made_on, says) in cases {
            let shown = decision(made_on);
            assert!(says.iter().all(|s| shown.contains(s)), "{shown}");
        }
    }
}
