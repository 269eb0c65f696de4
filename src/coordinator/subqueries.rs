//! Uncorrelated scalar subqueries run first, each as a distributed query of its own, and
//! their values go into the plan as literals.
//!
//! Single-node, a `ScalarSubqueryExec` runs them when the plan starts, and the expressions
//! reading them share its result slots in memory: neither can travel to a worker, and
//! datafusion-distributed schedules no stage below such a node. Running them first keeps
//! single-node's answers (NULL for no row, its error for more than one) and plans the query
//! once.
//!
//! Upstream: `scalar_of` mirrors DataFusion 55's private `execute_scalar_subquery`
//! (datafusion-physical-plan `src/scalar_subquery.rs`).
use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{exec_err, internal_err, Result, ScalarValue};
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::scalar_subquery::ScalarSubqueryExpr;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::scalar_subquery::ScalarSubqueryExec;
use datafusion::physical_plan::{execute_stream, ExecutionPlan};
use datafusion_proto::bytes::{
    physical_plan_from_bytes_with_extension_codec, physical_plan_to_bytes_with_proto_converter,
};
use datafusion_proto::physical_plan::from_proto::parse_physical_expr_with_converter;
use datafusion_proto::physical_plan::to_proto::serialize_physical_expr_with_converter;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalPlanNodeExt,
    PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf::{PhysicalExprNode, PhysicalPlanNode};
use futures::future::{try_join_all, BoxFuture};
use futures::{FutureExt, StreamExt};

use super::distribute::distribute_plan;
use crate::errors::not_distributable;
use crate::plan_rewrites;

/// `plan` with each uncorrelated scalar subquery run (distributed, with `state`) and its
/// value in place of it; `plan` itself when it has none.
pub fn run_first<'a>(
    plan: Arc<dyn ExecutionPlan>,
    state: &'a SessionState,
    codec: &'a dyn PhysicalExtensionCodec,
) -> BoxFuture<'a, Result<Arc<dyn ExecutionPlan>>> {
    async move {
        let holders = holders(&plan);
        if holders.is_empty() {
            return Ok(plan);
        }
        // Independent of each other and of the query: run them all at once, as single-node.
        let runs = holders.iter().flat_map(|sse| {
            sse.subqueries().iter().map(move |link| async move {
                let sub = run_first(Arc::clone(&link.plan), state, codec).await?;
                let value = scalar_of(sub, state).await?;
                sse.results().set(link.index, value)
            })
        });
        try_join_all(runs).await?;
        let bytes = physical_plan_to_bytes_with_proto_converter(plan, codec, &Inline)?;
        physical_plan_from_bytes_with_extension_codec(&bytes, &state.task_ctx(), codec)
    }
    .boxed()
}

/// Whether `plan` has uncorrelated scalar subqueries to run first.
pub fn holds_subqueries(plan: &Arc<dyn ExecutionPlan>) -> bool {
    !holders(plan).is_empty()
}

/// The `ScalarSubqueryExec`s of `plan`, outside the subqueries themselves (those nested in a
/// subquery are run with it).
fn holders(plan: &Arc<dyn ExecutionPlan>) -> Vec<&ScalarSubqueryExec> {
    let mut found = Vec::new();
    let mut pending = vec![plan];
    while let Some(node) = pending.pop() {
        match node.downcast_ref::<ScalarSubqueryExec>() {
            Some(sse) => {
                found.push(sse);
                pending.push(sse.input());
            }
            None => pending.extend(node.children()),
        }
    }
    found
}

/// Runs a subquery on the workers and gives its value as single-node would (DataFusion's own
/// `execute_scalar_subquery` is private: this is its logic, errors word for word).
async fn scalar_of(plan: Arc<dyn ExecutionPlan>, state: &SessionState) -> Result<ScalarValue> {
    let schema = plan.schema();
    if schema.fields().len() != 1 {
        return exec_err!(
            "Scalar subquery must return exactly one column, got {}",
            schema.fields().len()
        );
    }
    let plan = plan_rewrites::prepare(plan, state.config_options())?;
    let (plan, task_ctx): (_, Arc<TaskContext>) = distribute_plan(plan, state.clone()).await?;
    let mut stream = execute_stream(plan, task_ctx)?;
    let mut value = None;
    while let Some(batch) = stream.next().await.transpose()? {
        if batch.num_rows() == 0 {
            continue;
        }
        if value.is_some() || batch.num_rows() > 1 {
            return exec_err!("Scalar subquery returned more than one row");
        }
        value = Some(ScalarValue::try_from_array(batch.column(0), 0)?);
    }
    match value {
        Some(v) => Ok(v),
        None => ScalarValue::try_from(schema.field(0).data_type()),
    }
}

/// Serialises a plan whose subqueries have run: each `ScalarSubqueryExec` as its input, each
/// subquery expression as its value.
struct Inline;

impl PhysicalProtoConverterExtension for Inline {
    fn proto_to_execution_plan(
        &self,
        proto: &PhysicalPlanNode,
        ctx: &PhysicalPlanDecodeContext<'_>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        proto.try_into_physical_plan_with_context(ctx, self)
    }

    fn execution_plan_to_proto(
        &self,
        plan: &Arc<dyn ExecutionPlan>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> Result<PhysicalPlanNode> {
        match plan.downcast_ref::<ScalarSubqueryExec>() {
            Some(sse) => self.execution_plan_to_proto(sse.input(), codec),
            None => PhysicalPlanNode::try_from_physical_plan_with_converter(
                Arc::clone(plan),
                codec,
                self,
            ),
        }
    }

    fn proto_to_physical_expr(
        &self,
        proto: &PhysicalExprNode,
        input_schema: &Schema,
        ctx: &PhysicalPlanDecodeContext<'_>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        parse_physical_expr_with_converter(proto, input_schema, ctx, self)
    }

    fn physical_expr_to_proto(
        &self,
        expr: &Arc<dyn PhysicalExpr>,
        codec: &dyn PhysicalExtensionCodec,
    ) -> Result<PhysicalExprNode> {
        if !expr.is::<ScalarSubqueryExpr>() {
            return serialize_physical_expr_with_converter(expr, codec, self);
        }
        // It reads its slot, filled by now, whatever the batch.
        let empty = RecordBatch::new_empty(Arc::new(Schema::empty()));
        let ColumnarValue::Scalar(value) = expr.evaluate(&empty)? else {
            return internal_err!("a scalar subquery gave an array");
        };
        // DataFusion 55 types a subquery that cannot yield NULL as non-nullable, yet gives
        // NULL when it yields no row; single-node then may fail where the value lands. The
        // literal, typed nullable, would not: such a query runs as single-node does.
        if value.is_null() && !expr.nullable(&Schema::empty())? {
            return Err(not_distributable(
                "a scalar subquery typed non-nullable yields no row".into(),
            ));
        }
        let literal: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(value));
        serialize_physical_expr_with_converter(&literal, codec, self)
    }
}
