//! `KeptPart`: one part of a kept table as the coordinator knows it — which task of which
//! run made it, where it is held, and how big it is.
use datafusion::arrow::record_batch::RecordBatch;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// What a task said it holds: one row per partition of the stage.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeptPart {
    pub task: u32,
    pub partition: u32,
    pub rows: u64,
    pub bytes: u64,
    pub on_disk: bool,
    /// The process holding it (see [`store::PROCESS`]).
    pub process: String,
    /// The worker holding it, as the coordinator reaches it.
    pub holder: Option<String>,
    /// The store id it is held under when not the table's own (rows appended by `INSERT`).
    #[serde(default)]
    pub store: Option<String>,
}

impl KeptPart {
    /// A part no store holds, standing for rows the coordinator holds whole (a table's
    /// original rows, or those an insert kept under `store`), read where they are. It counts
    /// them (rows exactly, bytes in memory): a kept table's statistics are its parts'.
    pub fn whole(store: Option<Uuid>, batches: &[RecordBatch]) -> Self {
        Self {
            task: u32::MAX - 1,
            partition: 0,
            rows: batches.iter().map(|b| b.num_rows() as u64).sum(),
            bytes: batches
                .iter()
                .map(|b| b.get_array_memory_size() as u64)
                .sum(),
            on_disk: false,
            process: String::new(),
            holder: None,
            store: store.map(|s| s.to_string()),
        }
    }

    pub fn is_whole(&self) -> bool {
        self.task == u32::MAX - 1
    }

    /// The store id it is held under: its own, or its table's.
    pub fn store_id(&self, table: Uuid) -> Uuid {
        let own = self.store.as_deref().and_then(|s| Uuid::parse_str(s).ok());
        own.unwrap_or(table)
    }
}
