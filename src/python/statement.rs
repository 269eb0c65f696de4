//! What a SQL statement is, read by DataFusion's own parser (the session's dialect), so that
//! `DistributedContext.sql` sees a statement as `SessionContext.sql` does: comments, case and
//! spacing included.
use datafusion::sql::parser::{DFParser, Statement};
use datafusion::sql::sqlparser::ast::{Expr, Set, Statement as SqlStatement, Value};
use datafusion::sql::sqlparser::dialect::dialect_from_str;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::capsule::session_settings;

/// The namespace of our settings: `SET distributed.<key> = <value>`.
const NAMESPACE: &str = "distributed";

/// `(key, value)` when `sql` is one `SET distributed.<key> = <value>` (or `TO`) statement,
/// read in `session`'s SQL dialect, the key lower-cased and a quoted value unquoted; None for
/// anything else, including text that does not parse (the session then raises its own error
/// for it).
#[pyfunction]
pub fn distributed_setting(
    sql: &str,
    session: &Bound<'_, PyAny>,
) -> PyResult<Option<(String, String)>> {
    let Some(statement) = one_statement(sql, session, "set")? else {
        return Ok(None);
    };
    Ok(setting_of(statement))
}

/// `(table, query, or_replace, if_not_exists)` when `sql` is one `CREATE [OR REPLACE] TABLE
/// [IF NOT EXISTS] <table> AS <query>` (no column list), the query as SQL text; None for
/// anything else.
#[pyfunction]
pub fn create_table_as(
    sql: &str,
    session: &Bound<'_, PyAny>,
) -> PyResult<Option<(String, String, bool, bool)>> {
    let Some(SqlStatement::CreateTable(create)) = one_statement(sql, session, "create")? else {
        return Ok(None);
    };
    let Some(query) = create
        .query
        .filter(|_| create.columns.is_empty() && !create.external)
    else {
        return Ok(None);
    };
    Ok(Some((
        create.name.to_string(),
        query.to_string(),
        create.or_replace,
        create.if_not_exists,
    )))
}

/// A `DELETE` or `UPDATE` of one table, as SQL text: `(kind, table, where, assignments)`,
/// `kind` "delete" or "update", `where` None without a `WHERE`, `assignments` the `SET`
/// list's `(column, expression)`; None for anything else (a join, `RETURNING`, several
/// tables, a `LIMIT`: the session then answers as it does).
pub type Rewrite = (String, String, Option<String>, Vec<(String, String)>);

/// `DELETE FROM t [WHERE p]` or `UPDATE t SET c = e, ... [WHERE p]`, read in `session`'s
/// dialect (see [`Rewrite`]).
#[pyfunction]
pub fn delete_or_update(sql: &str, session: &Bound<'_, PyAny>) -> PyResult<Option<Rewrite>> {
    let text = sql.to_ascii_lowercase();
    let keyword = if text.contains("delete") {
        "delete"
    } else {
        "update"
    };
    Ok(one_statement(sql, session, keyword)?.and_then(rewrite_of))
}

fn rewrite_of(statement: SqlStatement) -> Option<Rewrite> {
    use datafusion::sql::sqlparser::ast::{AssignmentTarget, FromTable, TableFactor};
    let single = |t: &datafusion::sql::sqlparser::ast::TableWithJoins| match &t.relation {
        TableFactor::Table {
            name,
            alias: None,
            args: None,
            ..
        } if t.joins.is_empty() => Some(name.to_string()),
        _ => None,
    };
    match statement {
        SqlStatement::Delete(d) => {
            let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &d.from;
            let plain = d.tables.is_empty()
                && d.using.is_none()
                && d.returning.is_none()
                && d.order_by.is_empty()
                && d.limit.is_none();
            let [table] = from.as_slice() else {
                return None;
            };
            let table = single(table).filter(|_| plain)?;
            let selection = d.selection.map(|e| e.to_string());
            Some(("delete".into(), table, selection, Vec::new()))
        }
        SqlStatement::Update(u) => {
            let plain = u.from.is_none() && u.returning.is_none() && u.limit.is_none();
            let table = single(&u.table).filter(|_| plain)?;
            let mut assignments = Vec::new();
            for a in u.assignments {
                let AssignmentTarget::ColumnName(column) = a.target else {
                    return None;
                };
                let ident = column.0.last()?.as_ident()?;
                // As DataFusion names it: unquoted identifiers in lower case.
                let column = match ident.quote_style {
                    Some(_) => ident.value.clone(),
                    None => ident.value.to_lowercase(),
                };
                assignments.push((column, a.value.to_string()));
            }
            let selection = u.selection.map(|e| e.to_string());
            Some(("update".into(), table, selection, assignments))
        }
        _ => None,
    }
}

/// The one SQL statement `sql` is, read in `session`'s dialect; None when it is several, not
/// SQL DataFusion's parser takes as one, or does not parse (the session then raises its own
/// error for it), and at once when the text lacks the statement's `keyword` (lower case):
/// reading the session's dialect costs more than a short query's planning.
fn one_statement(
    sql: &str,
    session: &Bound<'_, PyAny>,
    keyword: &str,
) -> PyResult<Option<SqlStatement>> {
    if !sql.to_ascii_lowercase().contains(keyword) {
        return Ok(None);
    }
    let settings = session_settings(session)?;
    let dialect = settings
        .get("datafusion.sql_parser.dialect")
        .map_or("generic", String::as_str);
    parse_one(sql, dialect)
}

fn parse_one(sql: &str, dialect: &str) -> PyResult<Option<SqlStatement>> {
    let Some(dialect) = dialect_from_str(dialect) else {
        return Err(PyValueError::new_err(format!(
            "unknown SQL dialect {dialect:?}"
        )));
    };
    let Ok(mut statements) = DFParser::parse_sql_with_dialect(sql, dialect.as_ref()) else {
        return Ok(None);
    };
    if statements.len() != 1 {
        return Ok(None);
    }
    match statements.pop_front() {
        Some(Statement::Statement(statement)) => Ok(Some(*statement)),
        _ => Ok(None),
    }
}

fn setting_of(statement: SqlStatement) -> Option<(String, String)> {
    let SqlStatement::Set(Set::SingleAssignment {
        variable, values, ..
    }) = statement
    else {
        return None;
    };
    let key = variable.to_string().to_lowercase();
    if key.split('.').next() != Some(NAMESPACE) || values.len() != 1 {
        return None;
    }
    Some((key, value_text(&values[0])))
}

#[cfg(test)]
fn setting_in(sql: &str, dialect: &str) -> PyResult<Option<(String, String)>> {
    Ok(parse_one(sql, dialect)?.and_then(setting_of))
}

/// A setting's value as written: a string literal's contents, else the expression's SQL.
fn value_text(value: &Expr) -> String {
    match value {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        Expr::Identifier(ident) => ident.value.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(sql: &str) -> Option<(String, String)> {
        setting_in(sql, "generic").unwrap()
    }

    #[test]
    fn reads_our_settings_however_written() {
        let want = Some(("distributed.fallback".into(), "error".into()));
        assert_eq!(setting("SET distributed.fallback = 'error'"), want);
        assert_eq!(setting("set Distributed.FALLBACK to 'error';"), want);
        assert_eq!(
            setting("-- a comment\nSET /* inline */ distributed.fallback = error"),
            want
        );
        assert_eq!(
            setting("SET distributed.max_tasks_per_stage = 3"),
            Some(("distributed.max_tasks_per_stage".into(), "3".into()))
        );
    }

    fn rewrite(sql: &str) -> Option<Rewrite> {
        parse_one(sql, "generic").unwrap().and_then(rewrite_of)
    }

    #[test]
    fn reads_a_delete_or_update_of_one_table() {
        assert_eq!(
            rewrite("DELETE FROM t WHERE a % 3 = 1"),
            Some((
                "delete".into(),
                "t".into(),
                Some("a % 3 = 1".into()),
                vec![]
            ))
        );
        assert_eq!(
            rewrite("delete from s.t"),
            Some(("delete".into(), "s.t".into(), None, vec![]))
        );
        assert_eq!(
            rewrite("UPDATE t SET B = b + 1, \"Q\" = 2 WHERE a = 7"),
            Some((
                "update".into(),
                "t".into(),
                Some("a = 7".into()),
                vec![("b".into(), "b + 1".into()), ("Q".into(), "2".into())]
            ))
        );
        // What the session answers itself: joins, several tables, RETURNING.
        assert_eq!(rewrite("DELETE FROM t USING u WHERE t.a = u.a"), None);
        assert_eq!(rewrite("UPDATE t SET a = u.a FROM u WHERE t.b = u.b"), None);
        assert_eq!(rewrite("DELETE FROM t RETURNING a"), None);
        assert_eq!(rewrite("SELECT 1"), None);
    }

    #[test]
    fn leaves_everything_else() {
        assert_eq!(setting("SET datafusion.execution.batch_size = 10"), None);
        assert_eq!(setting("SELECT 'SET distributed.fallback = 1'"), None);
        assert_eq!(setting("SET distributed.fallback = 'a'; SELECT 1"), None);
        assert_eq!(setting("not sql at all"), None);
    }
}
