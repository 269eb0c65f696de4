//! What the join-planning tests share: a session that plans every join of more than 100 rows
//! partitioned (as TPC-H's big joins are at SF10), over tables made by SQL.
use datafusion::prelude::{SessionConfig, SessionContext};

pub async fn partitioned_joins(tables: &[&str]) -> SessionContext {
    let config = SessionConfig::new()
        .set_usize(
            "datafusion.optimizer.hash_join_single_partition_threshold",
            100,
        )
        .set_usize(
            "datafusion.optimizer.hash_join_single_partition_threshold_rows",
            100,
        )
        .with_target_partitions(2);
    let ctx = SessionContext::new_with_config(config);
    for sql in tables {
        ctx.sql(sql).await.unwrap().collect().await.unwrap();
    }
    ctx
}
