//! Checks a plan must pass before it is distributed. They change nothing: a plan that fails
//! one is not distributable, and the caller runs it single-node (its fallback) with the reason.
mod lost_in_transit;

pub use lost_in_transit::check_nothing_lost;
