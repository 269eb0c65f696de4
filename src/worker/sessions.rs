//! The sessions tasks run in, cloned rather than built.
//!
//! datafusion-distributed hands a worker's session builder a `SessionStateBuilder` with
//! DataFusion's default features, the task's config and the worker's runtime. Building it
//! registers every built-in function again, for each task of each query: a tenth of a
//! millisecond that a short query pays once per stage. Here a session is built once per
//! runtime and each task clones it with its own config.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, SessionStateBuilder};

/// Runtimes kept with their built session; past this many (object-store sets of different
/// queries), the oldest are forgotten and built again if they come back.
const KEPT: usize = 16;

#[derive(Default)]
pub struct TaskSessions {
    /// Keyed by the runtime's address; the `Arc` kept in the entry keeps that address taken.
    built: Mutex<HashMap<usize, (Arc<RuntimeEnv>, SessionState)>>,
}

impl TaskSessions {
    /// The session `builder` would build — default features, its config and runtime —
    /// cloned from the one built for that runtime.
    pub fn session(&self, mut builder: SessionStateBuilder) -> SessionState {
        let (Some(config), Some(runtime)) =
            (builder.config().take(), builder.runtime_env().clone())
        else {
            return builder.build();
        };
        let key = Arc::as_ptr(&runtime) as usize;
        let mut state = {
            let mut built = self.built.lock().expect("poisoned");
            if built.len() >= KEPT && !built.contains_key(&key) {
                built.clear();
            }
            let (_, state) = built.entry(key).or_insert_with(|| {
                let state = SessionStateBuilder::new()
                    .with_default_features()
                    .with_runtime_env(Arc::clone(&runtime))
                    .build();
                (runtime, state)
            });
            state.clone()
        };
        *state.config_mut() = config;
        // A task's file sink is one of the stage's writers: single-node's minimum of 4
        // parallel files per writer, times the tasks, oversubscribes the cores (8 writers on
        // 2 cores for 2 tasks wrote 1.1x slower than single-node's 4; 1 each writes at 0.9x).
        let one = "1".parse().expect("a positive number");
        state
            .config_mut()
            .options_mut()
            .execution
            .minimum_parallel_output_files = one;
        state
    }
}
