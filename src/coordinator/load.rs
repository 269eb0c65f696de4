//! The queries of this process whose results are being read now, by worker: a query planned
//! while others keep the same workers busy gets fewer tasks per stage.
//!
//! Alone, a query gets a task per worker in each stage, so that every core works on it. Beside
//! others the cores are busy anyway, and each extra task only adds its cost: its plan sent and
//! decoded, and its share of every shuffle encoded, sent and decoded again. Eight users at once
//! on `LocalCluster(2)` ran TPC-H SF0.1 in 1.41-1.68x single-node's wall time with a task per
//! worker, 1.05-1.32x with one task per stage (`benchmarks/concurrency.py`). So the tasks of a
//! stage are the workers shared among the queries running on them; a query planned alone, or
//! with `max_tasks_per_stage` set, is planned as before.
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

use url::Url;

/// Queries being read, by worker.
static RUNNING: LazyLock<Mutex<HashMap<Url, usize>>> = LazyLock::new(Mutex::default);

/// A query's result being read on `urls`; counted until dropped.
#[derive(Debug)]
pub struct Running {
    urls: Vec<Url>,
}

impl Running {
    pub fn start(urls: Vec<Url>) -> Self {
        let mut running = RUNNING.lock().expect("poisoned");
        for url in &urls {
            *running.entry(url.clone()).or_default() += 1;
        }
        Self { urls }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().expect("poisoned");
        for url in &self.urls {
            if let Some(n) = running.get_mut(url) {
                *n -= 1;
                if *n == 0 {
                    running.remove(url);
                }
            }
        }
    }
}

/// The most queries being read on any of `urls`.
pub fn running_on(urls: &[Url]) -> usize {
    let running = RUNNING.lock().expect("poisoned");
    urls.iter()
        .map(|u| running.get(u).copied().unwrap_or(0))
        .max()
        .unwrap_or(0)
}

/// The tasks per stage of a query planned over `workers` while `others` run on them: the
/// workers shared among them all (at least one); None alone.
pub fn tasks_per_stage(workers: usize, others: usize) -> Option<usize> {
    (others > 0).then(|| (workers / (others + 1)).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workers_are_shared_among_the_queries_running() {
        assert_eq!(tasks_per_stage(2, 0), None);
        assert_eq!(tasks_per_stage(2, 1), Some(1));
        assert_eq!(tasks_per_stage(8, 1), Some(4));
        assert_eq!(tasks_per_stage(8, 3), Some(2));
        assert_eq!(tasks_per_stage(2, 7), Some(1));
    }

    #[test]
    fn a_query_counts_while_its_result_is_read() {
        let a = Url::parse("http://load-test-a:1").unwrap();
        let b = Url::parse("http://load-test-b:1").unwrap();
        assert_eq!(running_on(&[a.clone(), b.clone()]), 0);
        let one = Running::start(vec![a.clone(), b.clone()]);
        let two = Running::start(vec![a.clone()]);
        assert_eq!(running_on(std::slice::from_ref(&a)), 2);
        assert_eq!(running_on(std::slice::from_ref(&b)), 1);
        drop(two);
        assert_eq!(running_on(&[a.clone(), b.clone()]), 1);
        drop(one);
        assert_eq!(running_on(&[a, b]), 0);
    }
}
