//! The distributed plan as a graph of stages, for pictures (`explain`'s SVG): each stage with
//! its tasks and operators, and the network boundaries through which it reads its inputs.
//!
//! Walked as `operator_metrics` walks it: from the head stage, each network boundary is
//! followed into its input stage; the coordinator's head is stage 0.
use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::physical_plan::{displayable, ExecutionPlan};
use datafusion_distributed::{DistributedExec, DistributedLeafExec, NetworkBoundaryExt};

/// One operator of a stage, with the totals of its run when the plan carries metrics.
pub struct StageOperator {
    /// Nesting inside the stage (0: the stage's top operator).
    pub depth: usize,
    pub line: String,
    pub output_rows: Option<usize>,
    /// CPU time, nanoseconds, summed over the stage's tasks.
    pub elapsed_compute: Option<usize>,
    /// Bytes a network boundary moved (Arrow IPC between processes; in-memory Arrow size
    /// within one).
    pub bytes: Option<usize>,
}

/// A stage: its number, tasks, operators (pre-order) and inputs `(stage, boundary operator)`.
pub struct Stage {
    pub num: usize,
    pub tasks: usize,
    pub operators: Vec<StageOperator>,
    pub inputs: Vec<(usize, String)>,
}

/// The stages of `plan`, head first; a plan with no stages is one stage 0 of one task.
pub fn stage_graph(plan: &Arc<dyn ExecutionPlan>) -> Vec<Stage> {
    let mut stages = BTreeMap::new();
    let head = match plan.downcast_ref::<DistributedExec>() {
        Some(_) => plan.children().into_iter().cloned().collect(),
        None => vec![Arc::clone(plan)],
    };
    let mut stage = new_stage(0, 1);
    for node in &head {
        walk(node, 0, &mut stage, &mut stages);
    }
    stages.insert(0, stage);
    stages.into_values().collect()
}

fn new_stage(num: usize, tasks: usize) -> Stage {
    Stage {
        num,
        tasks,
        operators: Vec::new(),
        inputs: Vec::new(),
    }
}

fn walk(
    node: &Arc<dyn ExecutionPlan>,
    depth: usize,
    stage: &mut Stage,
    stages: &mut BTreeMap<usize, Stage>,
) {
    // A leaf split into tasks stands for the operator it split.
    let shown = match node.downcast_ref::<DistributedLeafExec>() {
        Some(leaf) => displayable(leaf.original().as_ref()).one_line().to_string(),
        None => displayable(node.as_ref()).one_line().to_string(),
    };
    let metrics = node.metrics();
    let total = |name: &str| {
        let set = metrics.as_ref()?;
        let values: Vec<usize> = set
            .iter()
            .filter(|m| m.value().name() == name)
            .map(|m| m.value().as_usize())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    let line = shown.trim_end().to_string();
    let boundary = node.as_network_boundary();
    // What a boundary moved: on the wire between processes, else in memory (embedded).
    let bytes = boundary.and_then(|_| total("bytes_transferred").or_else(|| total("output_bytes")));
    stage.operators.push(StageOperator {
        depth,
        output_rows: total("output_rows"),
        elapsed_compute: total("elapsed_compute"),
        bytes,
        line: line.clone(),
    });
    if let Some(boundary) = boundary {
        let input = boundary.input_stage();
        stage.inputs.push((input.num(), line));
        if let (Some(plan), false) = (input.local_plan(), stages.contains_key(&input.num())) {
            let mut child = new_stage(input.num(), input.task_count());
            walk(plan, 0, &mut child, stages);
            stages.insert(child.num, child);
        }
        return;
    }
    for child in node.children() {
        walk(child, depth + 1, stage, stages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema;
    use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
    use datafusion::physical_plan::empty::EmptyExec;

    #[test]
    fn a_plan_without_stages_is_one_stage_of_one_task() {
        let leaf: Arc<dyn ExecutionPlan> = Arc::new(EmptyExec::new(Arc::new(Schema::empty())));
        let plan: Arc<dyn ExecutionPlan> = Arc::new(CoalescePartitionsExec::new(leaf));
        let stages = stage_graph(&plan);
        assert_eq!(stages.len(), 1);
        assert_eq!((stages[0].num, stages[0].tasks), (0, 1));
        let lines: Vec<_> = stages[0]
            .operators
            .iter()
            .map(|o| (o.depth, o.line.as_str()))
            .collect();
        assert_eq!(lines, [(0, "CoalescePartitionsExec"), (1, "EmptyExec")]);
        assert!(stages[0].inputs.is_empty());
    }
}
