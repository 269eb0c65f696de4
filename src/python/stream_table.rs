//! `unbounded_table`: what a statement creating an unbounded file table (`CREATE UNBOUNDED
//! EXTERNAL TABLE`) makes the table read, so its scans can travel to workers (see
//! `file_stream`).
use pyo3::prelude::*;

use super::capsule;
use super::errors::to_py_err;
use crate::file_stream::FileStreamSpec;
use crate::runtime;

/// `(name, if_not_exists, spec)` when `sql` creates an unbounded table over one local CSV or
/// JSON file, planned with `session`'s settings, `spec` what the codec is announced
/// (`WireCodec.announce_streams`); None for any other statement.
#[pyfunction]
pub fn unbounded_table(
    py: Python<'_>,
    sql: &str,
    session: &Bound<'_, PyAny>,
) -> PyResult<Option<(String, bool, String)>> {
    let settings = capsule::session_settings(session)?;
    let sql = sql.to_string();
    let created = runtime::wait_for(py, async move {
        FileStreamSpec::from_sql(&sql, &settings)
            .await
            .map_err(to_py_err)
    })?;
    Ok(created.map(|c| (c.name, c.if_not_exists, c.spec.to_json())))
}
