//! What every plan node of ours has alike. Our nodes evaluate no expressions of their own, so
//! the `ExecutionPlan` methods that walk and rebuild the tree read the same in each; they are
//! written once here, and each node's file keeps what makes it that node (its properties and
//! `execute`).
use std::sync::Arc;

use datafusion::common::{internal_err, Result};
use datafusion::physical_plan::ExecutionPlan;

/// The one plan a node of ours (`what`) wraps, among `plans` (its children, decoded or new).
pub fn only(plans: &[Arc<dyn ExecutionPlan>], what: &str) -> Result<Arc<dyn ExecutionPlan>> {
    match plans {
        [plan] => Ok(Arc::clone(plan)),
        _ => internal_err!("{what} wraps one plan, not {}", plans.len()),
    }
}

/// Writes `tag` for a node of type `T`, a marker that carries nothing but its kind (its one
/// input travels as the node's child).
pub fn encode_marker<T: ExecutionPlan>(
    node: &Arc<dyn ExecutionPlan>,
    tag: &[u8],
    buf: &mut Vec<u8>,
) -> Option<Result<()>> {
    node.downcast_ref::<T>()?;
    buf.extend_from_slice(tag);
    Some(Ok(()))
}

/// The one input of a marker node named `what`, if `buf` is its `tag`.
pub fn decode_marker(
    buf: &[u8],
    tag: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
    what: &str,
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    (buf == tag).then(|| only(inputs, what))
}

/// An error unless `partition` is 0, for a node named `what` with one output partition.
pub fn one_partition(partition: usize, what: &str) -> Result<()> {
    match partition {
        0 => Ok(()),
        _ => internal_err!("{what} has one partition, not {partition}"),
    }
}

/// `name`, `children`, `apply_expressions` and `with_new_children` of a node named `$name`
/// with no children: it stays itself whatever it is given.
macro_rules! leaf_node {
    ($name:literal) => {
        fn name(&self) -> &str {
            $name
        }

        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            vec![]
        }

        $crate::plan_nodes::no_expressions!();

        fn with_new_children(
            self: std::sync::Arc<Self>,
            _children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
        ) -> datafusion::common::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>
        {
            Ok(self)
        }
    };
}

/// The same for a node named `$name` over one input (the field `$input`), rebuilt over a new
/// input by `$rebuild` with `$this` the node and `$new` the input.
macro_rules! one_input_node {
    ($name:literal, $input:tt, |$this:ident, $new:ident| $rebuild:expr) => {
        fn name(&self) -> &str {
            $name
        }

        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            vec![&self.$input]
        }

        $crate::plan_nodes::no_expressions!();

        fn with_new_children(
            self: std::sync::Arc<Self>,
            children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
        ) -> datafusion::common::Result<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>
        {
            let $new = $crate::plan_nodes::only(&children, $name)?;
            let $this = self;
            Ok(std::sync::Arc::new($rebuild))
        }
    };
}

/// `apply_expressions` of a node that evaluates none.
macro_rules! no_expressions {
    () => {
        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
            ) -> datafusion::common::Result<
                datafusion::common::tree_node::TreeNodeRecursion,
            >,
        ) -> datafusion::common::Result<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }
    };
}

/// `properties` and `execute` of a node that runs as the plan in its field `$inner`: a marker
/// whose only work is what it carries (in fragments, or past the distributed planner).
macro_rules! runs_as {
    ($inner:tt) => {
        fn properties(&self) -> &std::sync::Arc<datafusion::physical_plan::PlanProperties> {
            self.$inner.properties()
        }

        fn execute(
            &self,
            partition: usize,
            ctx: std::sync::Arc<datafusion::execution::TaskContext>,
        ) -> datafusion::common::Result<datafusion::execution::SendableRecordBatchStream> {
            self.$inner.execute(partition, ctx)
        }
    };
}

pub(crate) use {leaf_node, no_expressions, one_input_node, runs_as};
