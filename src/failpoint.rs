//! Failpoints for the crash tests: named steps in the middle of a commit protocol at which a
//! test build stops the process, so that a test can check that a kill at exactly that step
//! loses and duplicates nothing (tests/it/crash.rs, tests/it/schema_evolution.rs).
//!
//! A test sets one variable in the environment of the `floe run` process it spawns:
//! `FLOE_CRASH_AT=<step>` aborts the process at that step (no cleanup, as SIGKILL), and
//! `FLOE_PAUSE_AT=<step>` holds the step for 5 s (a window for the test to SIGSTOP it). Only
//! builds with the `testsuite` feature read them; otherwise [`step_point`] compiles to nothing.
//!
//! `FLOE_BLOCK_AT=<step>` holds the blocking thread of a step that runs on one for 120 s, once
//! per process (a hung librdkafka call). Blocking steps: `kafka-metadata` (a metadata call), `kafka-probe` (a probe client's
//! read).
//!
//! Steps: `compaction-written` (compaction outputs written, not committed), `rewrite-written`
//! (a rewrite's manifests and manifest list written, not swapped), `rewrite-committed` (swapped,
//! nothing after it done), `evolution-decided` and `evolution-committed` (a schema evolution
//! before and after its commit).

/// Stops the process at step `step` when the environment names it (see the module docs); does
/// nothing without the `testsuite` feature.
pub(crate) async fn step_point(step: &str) {
    #[cfg(feature = "testsuite")]
    {
        if std::env::var("FLOE_CRASH_AT").is_ok_and(|s| s == step) {
            eprintln!("FLOE_CRASH_AT={step}: aborting");
            std::process::abort();
        }
        if std::env::var("FLOE_PAUSE_AT").is_ok_and(|s| s == step) {
            eprintln!("FLOE_PAUSE_AT={step}: pausing");
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        }
    }
    let _ = step;
}

/// Blocks the calling thread (a blocking-pool thread) at step `step`, the first time: for
/// 120 s when the environment names it in `FLOE_BLOCK_AT`, or for the time given to
/// [`block_next`] (see the module docs); does nothing without the `testsuite` feature.
pub(crate) fn blocking_point(step: &str) {
    #[cfg(feature = "testsuite")]
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        static BLOCKED: AtomicBool = AtomicBool::new(false);
        let armed = ARMED
            .lock()
            .expect("failpoint lock")
            .take_if(|(armed, _)| armed == step)
            .map(|(_, d)| d);
        let from_env = (std::env::var("FLOE_BLOCK_AT").is_ok_and(|s| s == step)
            && !BLOCKED.swap(true, Ordering::SeqCst))
        .then_some(std::time::Duration::from_secs(120));
        if let Some(hold) = armed.or(from_env) {
            eprintln!("FLOE_BLOCK_AT={step}: blocking this thread for {hold:?}");
            // On a blocking-pool thread by design: the failpoint is a hung blocking call.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(hold);
        }
    }
    let _ = step;
}

#[cfg(feature = "testsuite")]
static ARMED: std::sync::Mutex<Option<(String, std::time::Duration)>> = std::sync::Mutex::new(None);

/// In-process tests: the next thread to reach blocking step `step` blocks for `hold` (once).
#[cfg(feature = "testsuite")]
pub fn block_next(step: &str, hold: std::time::Duration) {
    *ARMED.lock().expect("failpoint lock") = Some((step.to_string(), hold));
}
