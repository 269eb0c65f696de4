//! Recursive queries (`WITH RECURSIVE`) in plans: `RecursiveQueryExec` and the `WorkTableExec`
//! its recursive term reads, which datafusion-proto 55 has no encoding for.
//!
//! A recursive query is written as its name, `is_distinct` and output schema (its two terms
//! travel as the node's children); a work table as its schema only. Decoding the query gives
//! each work table of its recursive term (not of a query nested in it) the query's name and
//! the projection its schema stands for, then builds the query, which links them to its own
//! work table as DataFusion's planner does.
//!
//! From datafusion-python the nodes arrive foreign (over FFI, `codec::WireCodec`), which
//! shows neither name nor `is_distinct`: those come from the plan's display, announced before
//! serialising (`write_query`). In fragments they are our own nodes (`our_nodes`).
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;
use datafusion::physical_plan::work_table::WorkTableExec;
use datafusion::physical_plan::ExecutionPlan;

const QUERY: &[u8] = b"dfdpy.recursive-query";
const WORK_TABLE: &[u8] = b"dfdpy.work-table";

/// Writes a recursive query of `name`.
pub fn write_query(
    name: &str,
    is_distinct: bool,
    schema: &SchemaRef,
    buf: &mut Vec<u8>,
) -> Result<()> {
    buf.extend_from_slice(QUERY);
    buf.push(u8::from(is_distinct));
    buf.extend_from_slice(&(name.len() as u64).to_le_bytes());
    buf.extend_from_slice(name.as_bytes());
    write_schema(schema, buf)
}

/// Writes a work table (its name comes from the query it belongs to).
pub fn write_work_table(schema: &SchemaRef, buf: &mut Vec<u8>) -> Result<()> {
    buf.extend_from_slice(WORK_TABLE);
    write_schema(schema, buf)
}

fn write_schema(schema: &SchemaRef, buf: &mut Vec<u8>) -> Result<()> {
    // An IPC stream of no batches.
    let mut writer = StreamWriter::try_new(&mut *buf, schema)?;
    writer.finish()?;
    Ok(())
}

fn read_schema(buf: &[u8]) -> Result<SchemaRef> {
    Ok(StreamReader::try_new(buf, None)?.schema())
}

/// Writes `node` if it is a recursive query or a work table of our build.
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    if let Some(q) = node.downcast_ref::<RecursiveQueryExec>() {
        return Some(write_query(q.name(), q.is_distinct(), &q.schema(), buf));
    }
    let table = node.downcast_ref::<WorkTableExec>()?;
    Some(write_work_table(&table.schema(), buf))
}

/// The node `buf` stands for over its decoded `inputs`, if `buf` is one of the two.
pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    if let Some(schema) = buf.strip_prefix(WORK_TABLE) {
        return Some((|| {
            // Named and projected by its query (`decode_query`).
            let table = WorkTableExec::new(String::new(), read_schema(schema)?, None)?;
            Ok(Arc::new(table) as Arc<dyn ExecutionPlan>)
        })());
    }
    buf.strip_prefix(QUERY)
        .map(|rest| decode_query(rest, inputs))
}

fn decode_query(rest: &[u8], inputs: &[Arc<dyn ExecutionPlan>]) -> Result<Arc<dyn ExecutionPlan>> {
    let bad = || exec_datafusion_err!("not a recursive query");
    let (&distinct, rest) = rest.split_first().ok_or_else(bad)?;
    let (len, rest) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
    let len = usize::try_from(u64::from_le_bytes(*len)).map_err(|_| bad())?;
    let name = std::str::from_utf8(rest.get(..len).ok_or_else(bad)?).map_err(|_| bad())?;
    let schema = read_schema(&rest[len..])?;
    let [static_term, recursive_term] = inputs else {
        return Err(bad());
    };
    let recursive_term = own_work_tables(Arc::clone(recursive_term), name, &schema)?;
    let query = RecursiveQueryExec::try_new(
        name.to_string(),
        schema,
        Arc::clone(static_term),
        recursive_term,
        distinct != 0,
    )?;
    Ok(Arc::new(query))
}

/// `term` with its work tables (those of this query, not of one nested in it) named `name`
/// and reading the columns of the query's `schema` that their own schema names.
fn own_work_tables(
    term: Arc<dyn ExecutionPlan>,
    name: &str,
    schema: &SchemaRef,
) -> Result<Arc<dyn ExecutionPlan>> {
    let owned = term.transform_down(|node| {
        if node.is::<RecursiveQueryExec>() {
            return Ok(Transformed::new(node, false, TreeNodeRecursion::Jump));
        }
        let Some(table) = node.downcast_ref::<WorkTableExec>() else {
            return Ok(Transformed::no(node));
        };
        let projection = table
            .schema()
            .fields()
            .iter()
            .map(|f| schema.index_of(f.name()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        let whole = projection.iter().copied().eq(0..schema.fields().len());
        let projection = (!whole).then_some(projection);
        let table = WorkTableExec::new(name.to_string(), Arc::clone(schema), projection)?;
        Ok(Transformed::yes(Arc::new(table) as Arc<dyn ExecutionPlan>))
    })?;
    Ok(owned.data)
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::SessionContext;

    use super::*;
    use crate::codec::test_support::{physical, round_trip, rows};

    #[tokio::test]
    async fn recursive_queries_survive_the_round_trip() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE t (a INT, b INT) AS VALUES (1, 10), (2, 20)")
            .await
            .unwrap();
        for sql in [
            "WITH RECURSIVE n AS (SELECT 1 AS id UNION ALL SELECT id + 1 FROM n WHERE id < 10) \
             SELECT sum(id) FROM n",
            "WITH RECURSIVE r AS (SELECT a, b FROM t UNION SELECT a, b + 1 FROM r WHERE b < 13) \
             SELECT * FROM r ORDER BY a, b",
            // Only one column of the work table is read.
            "WITH RECURSIVE r AS (SELECT a, b FROM t UNION ALL SELECT a + 1, 0 FROM r \
             WHERE a < 4) SELECT * FROM r ORDER BY a, b",
            "WITH RECURSIVE o AS (SELECT 1 AS a UNION ALL (WITH RECURSIVE i AS (SELECT 1 AS a \
             UNION ALL SELECT a + 2 FROM i WHERE a < 5) SELECT o.a + i.a FROM i, o \
             WHERE o.a < 5)) SELECT * FROM o ORDER BY a",
        ] {
            let plan = physical(&ctx, sql).await;
            let decoded = round_trip(Arc::clone(&plan), &ctx.task_ctx());
            assert!(decoded
                .exists(|n| Ok(n.is::<RecursiveQueryExec>()))
                .unwrap());
            let single = rows(plan, ctx.task_ctx()).await;
            assert_eq!(rows(decoded, ctx.task_ctx()).await, single, "{sql}");
        }
    }
}
