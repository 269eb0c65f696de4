//! The parts of kept tables this process holds: a worker's, or the embedded cluster's (then the
//! coordinator's too, one store for the process, so nothing is copied between them).
//!
//! A part is what one partition of one task of the keeping query produced. It is held in
//! memory while the process's memory pool grants it (the bytes stay reserved there, so the
//! queries that run next see them as used), else written to the process's spill directory as
//! an Arrow IPC stream and read from there.
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{exec_datafusion_err, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SpillFile, TaskContext};
use uuid::Uuid;

use crate::batches::in_own_buffers;

/// Which part of a table: the keeping query's task and its partition.
pub type PartKey = (u32, u32);

enum Place {
    Memory {
        batches: Vec<RecordBatch>,
        _reservation: MemoryReservation,
    },
    Disk(Arc<dyn SpillFile>),
}

struct Part {
    place: Place,
    schema: SchemaRef,
    bytes: u64,
}

/// What a part costs where it is held.
#[derive(Clone, Copy, Debug, Default)]
pub struct PartSize {
    pub rows: u64,
    pub bytes: u64,
    pub on_disk: bool,
}

type Tables = HashMap<Uuid, HashMap<PartKey, Arc<Part>>>;

static STORE: LazyLock<Mutex<Tables>> = LazyLock::new(Mutex::default);

/// This process, as the parts it holds say where they are (the coordinator tells its own from
/// its workers' by it).
pub static PROCESS: LazyLock<Uuid> = LazyLock::new(Uuid::new_v4);

/// Holds `batches` as `table`'s part `key`, in memory when the pool of `ctx`'s runtime grants
/// their bytes, else on its disk.
pub fn put(
    table: Uuid,
    key: PartKey,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    ctx: &TaskContext,
) -> Result<PartSize> {
    let batches = batches
        .into_iter()
        .map(compact)
        .collect::<Result<Vec<_>>>()?;
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    let bytes: u64 = batches
        .iter()
        .map(|b| b.get_array_memory_size() as u64)
        .sum();
    let runtime = ctx.runtime_env();
    let reservation =
        MemoryConsumer::new(format!("kept table {table}")).register(&runtime.memory_pool);
    let place = match reservation.try_grow(bytes as usize) {
        Ok(()) => Place::Memory {
            batches,
            _reservation: reservation,
        },
        Err(_) => {
            let file = runtime
                .disk_manager
                .create_tmp_file(&format!("kept table {table}"))?;
            let mut out = file.open_writer()?;
            {
                let mut writer = StreamWriter::try_new(&mut out, &schema)?;
                for batch in &batches {
                    writer.write(batch)?;
                }
                writer.finish()?;
            }
            out.finish()?;
            Place::Disk(file)
        }
    };
    let on_disk = matches!(place, Place::Disk(_));
    let part = Part {
        place,
        schema,
        bytes,
    };
    let mut store = STORE.lock().expect("poisoned");
    store.entry(table).or_default().insert(key, Arc::new(part));
    Ok(PartSize {
        rows,
        bytes,
        on_disk,
    })
}

/// `batch`, copied into buffers of its own when it is a small slice of bigger ones (a scan's
/// batch dealt to tasks, a filter that kept every row, rows received from another worker):
/// holding the slice would hold, and count, every byte of the buffers it shares.
fn compact(batch: RecordBatch) -> Result<RecordBatch> {
    in_own_buffers(batch, |used| 2 * used + (64 << 10))
}

/// The batches of `table`'s part `key`, if this process holds it.
pub fn get(table: Uuid, key: PartKey) -> Option<Result<Vec<RecordBatch>>> {
    let part = STORE
        .lock()
        .expect("poisoned")
        .get(&table)?
        .get(&key)
        .cloned()?;
    Some(match &part.place {
        Place::Memory { batches, .. } => Ok(batches.clone()),
        Place::Disk(file) => read_file(file.as_ref(), &part.schema),
    })
}

fn read_file(file: &dyn SpillFile, schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let path = file
        .path()
        .ok_or_else(|| exec_datafusion_err!("a kept part's spill file has no local path"))?;
    let reader = StreamReader::try_new(std::io::BufReader::new(std::fs::File::open(path)?), None)?;
    let batches = reader.collect::<Result<Vec<_>, _>>()?;
    // Read as written: the schema is the part's own.
    debug_assert!(batches
        .iter()
        .all(|b| b.schema().fields() == schema.fields()));
    Ok(batches)
}

/// Frees every part of `table` this process holds: their memory and files. Returns the parts
/// and bytes freed.
pub fn free(table: Uuid) -> (u64, u64) {
    let parts = STORE.lock().expect("poisoned").remove(&table);
    let parts = parts.unwrap_or_default();
    let bytes = parts.values().map(|p| p.bytes).sum();
    let count = parts.len() as u64;
    drop(parts);
    if bytes > 0 {
        return_freed_pages();
    }
    (count, bytes)
}

/// Asks jemalloc to give the pages freed to the system now: it otherwise returns them as
/// later allocations pass by, and an idle worker that dropped a table makes none.
fn return_freed_pages() {
    // "arena.<MALLCTL_ARENAS_ALL>.purge": every arena (jemalloc 5's MALLCTL_ARENAS_ALL, 4096).
    let name = c"arena.4096.purge";
    // SAFETY: a NUL-terminated control name; purge reads and writes nothing.
    let code = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    if code != 0 {
        log::debug!("jemalloc did not purge its arenas (error {code})");
    }
}

/// Parts this process holds, and their bytes in memory and on disk (for the meters).
pub fn held() -> (u64, u64, u64) {
    let store = STORE.lock().expect("poisoned");
    let (mut parts, mut memory, mut disk) = (0u64, 0u64, 0u64);
    for part in store.values().flat_map(|t| t.values()) {
        parts += 1;
        match part.place {
            Place::Memory { .. } => memory += part.bytes,
            Place::Disk(_) => disk += part.bytes,
        }
    }
    (parts, memory, disk)
}
