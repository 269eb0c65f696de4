//! `PartialSortExec` (a sort that extends the order its input already has: `ORDER BY a, b, d`
//! over a table declared `WITH ORDER (a, b)`) in plans: DataFusion 55's encoding has no form
//! for it.
//!
//! Written as its sort columns (name, index, direction), the length of the prefix its input
//! is sorted on, its limit and whether it keeps its input's partitions. On our side the node
//! is read directly; from datafusion-python it arrives foreign, showing its name and schema
//! only, so its display is announced before serialising (as recursive queries are) and the
//! announced sort whose columns the node's input has is written.
use std::sync::Arc;

use datafusion::arrow::compute::SortOptions;
use datafusion::common::{exec_datafusion_err, exec_err, Result};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
use datafusion::physical_plan::sorts::partial_sort::PartialSortExec;
use datafusion::physical_plan::ExecutionPlan;
use serde::{Deserialize, Serialize};

use crate::plan_nodes::only;

const TAG: &[u8] = b"dfdpy.partial-sort:";

/// A sort column: its name, its index in the input, descending, nulls first.
pub type SortColumn = (String, usize, bool, bool);

/// What a `PartialSortExec` of plain columns holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartialSort {
    pub columns: Vec<SortColumn>,
    pub common_prefix_length: usize,
    pub fetch: Option<usize>,
    #[serde(default)]
    pub preserve_partitioning: bool,
}

impl PartialSort {
    /// Whether the sort's columns are those of `input` at their indices.
    fn fits(&self, input: &Arc<dyn ExecutionPlan>) -> bool {
        let schema = input.schema();
        self.columns.iter().all(|(name, index, _, _)| {
            schema
                .fields()
                .get(*index)
                .is_some_and(|f| f.name() == name)
        })
    }
}

/// Writes `node` if it is a `PartialSortExec` sorting by plain columns.
pub fn encode(node: &Arc<dyn ExecutionPlan>, buf: &mut Vec<u8>) -> Option<Result<()>> {
    let sort = node.downcast_ref::<PartialSortExec>()?;
    let columns = sort
        .expr()
        .iter()
        .map(|e| {
            let column = e.expr.downcast_ref::<Column>()?;
            let options = e.options;
            Some((
                column.name().to_string(),
                column.index(),
                options.descending,
                options.nulls_first,
            ))
        })
        .collect::<Option<Vec<_>>>()?;
    let written = PartialSort {
        columns,
        common_prefix_length: sort.common_prefix_length(),
        fetch: sort.fetch(),
        preserve_partitioning: sort.preserve_partitioning(),
    };
    Some(write(&written, buf))
}

/// Writes a foreign `PartialSortExec` (datafusion-python's) as the one of `announced` whose
/// columns its input has; refused when none or several different ones fit.
pub fn encode_announced(
    node: &Arc<dyn ExecutionPlan>,
    announced: &[PartialSort],
    buf: &mut Vec<u8>,
) -> Result<()> {
    let children = node.children();
    let [input] = children.as_slice() else {
        return exec_err!("a PartialSortExec with {} inputs", children.len());
    };
    let mut fitting: Vec<&PartialSort> = announced.iter().filter(|s| s.fits(input)).collect();
    fitting.dedup();
    let [sort] = fitting.as_slice() else {
        return exec_err!(
            "a PartialSortExec whose sort {} of the announced ones fit, not one",
            fitting.len()
        );
    };
    let partitions = node.properties().partitioning.partition_count();
    let written = PartialSort {
        preserve_partitioning: partitions > 1,
        ..(*sort).clone()
    };
    write(&written, buf)
}

fn write(sort: &PartialSort, buf: &mut Vec<u8>) -> Result<()> {
    buf.extend_from_slice(TAG);
    serde_json::to_writer(&mut *buf, sort)
        .map_err(|e| exec_datafusion_err!("encoding PartialSortExec: {e}"))
}

/// The sort `buf` and its decoded input stand for, if `buf` is a partial sort.
pub fn decode(
    buf: &[u8],
    inputs: &[Arc<dyn ExecutionPlan>],
) -> Option<Result<Arc<dyn ExecutionPlan>>> {
    let payload = buf.strip_prefix(TAG)?;
    Some((|| {
        let sort: PartialSort = serde_json::from_slice(payload)
            .map_err(|e| exec_datafusion_err!("decoding PartialSortExec: {e}"))?;
        let input = only(inputs, "PartialSortExec")?;
        if !sort.fits(&input) {
            return exec_err!("a PartialSortExec's columns are not its input's");
        }
        let exprs = sort
            .columns
            .iter()
            .map(|(name, index, descending, nulls_first)| {
                let options = SortOptions {
                    descending: *descending,
                    nulls_first: *nulls_first,
                };
                PhysicalSortExpr::new(Arc::new(Column::new(name, *index)), options)
            });
        let ordering = LexOrdering::new(exprs)
            .ok_or_else(|| exec_datafusion_err!("a PartialSortExec without sort columns"))?;
        let node = PartialSortExec::new(ordering, input, sort.common_prefix_length)
            .with_fetch(sort.fetch)
            .with_preserve_partitioning(sort.preserve_partitioning);
        Ok(Arc::new(node) as Arc<dyn ExecutionPlan>)
    })())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::util::pretty::pretty_format_batches;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::datasource::source::DataSourceExec;
    use datafusion::execution::TaskContext;
    use datafusion::physical_plan::collect;

    fn input() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int32, false),
            Field::new("d", DataType::Int32, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int32Array::from(vec![1, 1, 1, 2, 2])),
                Arc::new(Int32Array::from(vec![3, 1, 2, 9, 4])),
            ],
        )
        .unwrap();
        let ordering = LexOrdering::new([PhysicalSortExpr::new(
            Arc::new(Column::new("a", 0)),
            SortOptions::default(),
        )])
        .unwrap();
        let source = MemorySourceConfig::try_new(&[vec![batch]], schema, None)
            .unwrap()
            .try_with_sort_information(vec![ordering])
            .unwrap();
        DataSourceExec::from_data_source(source)
    }

    fn sort_by_a_then_d_desc() -> PartialSort {
        PartialSort {
            columns: vec![("a".into(), 0, false, false), ("d".into(), 1, true, true)],
            common_prefix_length: 1,
            fetch: Some(4),
            preserve_partitioning: false,
        }
    }

    #[tokio::test]
    async fn a_partial_sort_travels_and_sorts_the_same() {
        let mut buf = Vec::new();
        write(&sort_by_a_then_d_desc(), &mut buf).unwrap();
        let node = decode(&buf, &[input()]).unwrap().unwrap();
        // Written again from the node itself (our side), and read back.
        let mut again = Vec::new();
        encode(&node, &mut again).unwrap().unwrap();
        assert_eq!(buf, again);
        let node = decode(&again, &[input()]).unwrap().unwrap();
        let rows = collect(node, Arc::new(TaskContext::default()))
            .await
            .unwrap();
        let shown = pretty_format_batches(&rows).unwrap().to_string();
        let order: Vec<&str> = shown
            .lines()
            .filter(|l| l.starts_with("| "))
            .skip(1)
            .collect();
        assert_eq!(
            order,
            ["| 1 | 3 |", "| 1 | 2 |", "| 1 | 1 |", "| 2 | 9 |"],
            "{shown}"
        );
    }

    #[test]
    fn a_sort_whose_columns_the_input_lacks_is_refused() {
        let mut other = sort_by_a_then_d_desc();
        other.columns[1].0 = "e".into();
        let mut buf = Vec::new();
        write(&other, &mut buf).unwrap();
        assert!(decode(&buf, &[input()]).unwrap().is_err());
        let node: Arc<dyn ExecutionPlan> = Arc::new(PartialSortExec::new(
            LexOrdering::new([PhysicalSortExpr::new(
                Arc::new(Column::new("a", 0)),
                SortOptions::default(),
            )])
            .unwrap(),
            input(),
            1,
        ));
        // Two different announced sorts fit: which one this is cannot be told.
        let mut by_d = sort_by_a_then_d_desc();
        by_d.fetch = None;
        let err = encode_announced(&node, &[sort_by_a_then_d_desc(), by_d], &mut Vec::new());
        assert!(err.is_err());
        assert!(encode_announced(&node, &[other], &mut Vec::new()).is_err());
    }
}
