//! How long each step of a query's fixed cost took: planning it for the workers and the run
//! that reads the result whole. `benchmarks/overhead.py`
//! breaks a short query's cost over single-node into these (`DistributedPlan.steps()`).
use std::time::{Duration, Instant};

/// The steps timed so far, each ended by [`StepClock::lap`].
#[derive(Debug, Clone)]
pub struct StepClock {
    last: Instant,
    steps: Vec<(&'static str, Duration)>,
}

impl Default for StepClock {
    fn default() -> Self {
        Self::start()
    }
}

impl StepClock {
    pub fn start() -> Self {
        Self {
            last: Instant::now(),
            steps: Vec::new(),
        }
    }

    /// Ends the step `name` (begun at the previous lap, or at the start) and begins the next.
    pub fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.steps.push((name, now - self.last));
        self.last = now;
    }

    /// Adds a step timed elsewhere (one that overlapped others).
    pub fn record(&mut self, name: &'static str, took: Duration) {
        self.steps.push((name, took));
    }

    /// The time since the last lap (or the start).
    pub fn elapsed(&self) -> Duration {
        self.last.elapsed()
    }

    /// Begins the next step here, leaving the time since the last lap out.
    pub fn restart(&mut self) {
        self.last = Instant::now();
    }

    pub fn steps(&self) -> &[(&'static str, Duration)] {
        &self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_are_the_times_between_them_in_order() {
        let mut clock = StepClock::start();
        std::thread::sleep(Duration::from_millis(5));
        clock.lap("first");
        clock.restart();
        clock.lap("second");
        let steps = clock.steps();
        assert_eq!(
            steps.iter().map(|s| s.0).collect::<Vec<_>>(),
            ["first", "second"]
        );
        assert!(steps[0].1 >= Duration::from_millis(5));
        assert!(steps[1].1 < Duration::from_millis(5));
    }
}
