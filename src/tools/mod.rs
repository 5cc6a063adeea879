//! Tools around the pipeline, not part of it: the one-command quickstart ([`quickstart`]), the
//! load generator behind `floe-loadgen` ([`loadgen`]) and the deterministic sample-event
//! generator both use ([`sample_events`]); and stdout for every command that prints
//! ([`stdout`]: a closed pipe ends the command quietly).

pub mod loadgen;
pub mod quickstart;
pub mod sample_events;
pub mod stdout;
