//! A result with two columns of one name (`SELECT *` of a join whose sides share `id`): a
//! distributed result is read through a table provider, whose columns need distinct names, so
//! the repeated ones get distinct names here and the Python side gives the result back with
//! single-node's names (`dataframe._single_node_names`).
use std::collections::HashSet;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::ExecutionPlan;

/// `plan`, its repeated output names made distinct by a projection on top (`id`, `id#2`):
/// unchanged when every name is already distinct.
pub fn rename_repeated(plan: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = plan.schema();
    let mut taken: HashSet<String> = HashSet::new();
    let mut repeated = false;
    let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = Vec::new();
    for (i, field) in schema.fields().iter().enumerate() {
        let mut name = field.name().clone();
        let mut k = 1;
        while taken.contains(&name) {
            repeated = true;
            k += 1;
            name = format!("{}#{k}", field.name());
        }
        taken.insert(name.clone());
        exprs.push((Arc::new(Column::new(field.name(), i)), name));
    }
    if !repeated {
        return Ok(plan);
    }
    Ok(Arc::new(ProjectionExec::try_new(exprs, plan)?))
}
