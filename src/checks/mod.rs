//! Checks a plan must pass before it is distributed. They change nothing: a plan that fails
//! one is not distributable, and the caller runs it single-node (its fallback) with the reason.
mod flight_types;
mod lost_in_transit;

pub use flight_types::check_flight_types;
pub use lost_in_transit::check_nothing_lost;
