//! Command-line subcommands implemented in the library (the binary stays thin).
pub mod bench;
pub mod bench_commits;
pub mod bench_upsert;
pub mod channel;
pub mod records;
pub mod validate;
