//! What a worker says of itself in the handshake (`GetWorkerInfo`'s one text field): its
//! release on the first line, then one per line the functions its setup registered beyond
//! DataFusion's built-ins. Functions of extension packages travel by name, so the coordinator
//! checks that every worker of a query has those it names before sending any task.
use std::collections::BTreeSet;

/// The text a worker of release `version` with `functions` answers the handshake with.
pub fn advertise(version: &str, functions: &[String]) -> String {
    let mut info = version.to_string();
    for name in functions.iter().filter(|n| !n.contains('\n')) {
        info.push('\n');
        info.push_str(name);
    }
    info
}

/// A worker's release and functions, from its handshake answer.
pub fn parse(info: &str) -> (&str, BTreeSet<String>) {
    let mut lines = info.split('\n');
    let version = lines.next().unwrap_or_default();
    (version, lines.map(str::to_string).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_and_its_functions_read_back() {
        let info = advertise("1.2.3", &["mode".into(), "max_by".into()]);
        let (version, functions) = parse(&info);
        assert_eq!(version, "1.2.3");
        assert_eq!(functions, ["max_by", "mode"].map(String::from).into());
        assert_eq!(parse("1.2.3"), ("1.2.3", BTreeSet::new()));
    }
}
