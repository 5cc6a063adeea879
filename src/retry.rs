//! The one exponential backoff every retry loop of floe uses (starting a channel, restarting a
//! worker loop, committer rounds, Kafka metadata calls, schema registry lookups), so that its
//! rule is written once: wait `first`, then `factor` times longer after each failure, never more
//! than `max`; a success (or a long healthy run) starts again from `first`.

use std::time::Duration;

/// Exponential backoff between attempts of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    factor: u32,
    next: Duration,
}

impl Backoff {
    /// Waits of `first`, doubling, capped at `max`.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Backoff {
            first,
            max,
            factor: 2,
            next: first,
        }
    }

    /// The same backoff growing by `factor` (at least 1) after each failure.
    pub const fn with_factor(mut self, factor: u32) -> Self {
        self.factor = if factor == 0 { 1 } else { factor };
        self
    }

    /// The wait before the next attempt; the one after it is `factor` times longer (at most
    /// `max`).
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(self.factor).min(self.max);
        delay
    }

    /// The wait [`Backoff::next_delay`] returns next, without advancing.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Starts again from `first` (after a success).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// Runs `op` until it succeeds, fails with an error `retryable` refuses, or has run `attempts`
/// times, waiting [`Backoff::next_delay`] between attempts (each wait logged with `what`). The
/// schema registries' lookups use it.
///
/// Errors: the last attempt's error.
pub async fn with_retries<T, E, Op, Fut>(
    attempts: u32,
    mut backoff: Backoff,
    what: &str,
    retryable: impl Fn(&E) -> bool,
    mut op: Op,
) -> Result<T, E>
where
    E: std::fmt::Display,
    Op: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut attempt = 1;
    loop {
        match op().await {
            Err(e) if retryable(&e) && attempt < attempts => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e, attempt, "{what} failed; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_by_the_factor_up_to_the_cap_and_reset() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(500), ms(8000));
        let delays: Vec<_> = (0..7).map(|_| b.next_delay()).collect();
        assert_eq!(
            delays,
            [
                ms(500),
                ms(1000),
                ms(2000),
                ms(4000),
                ms(8000),
                ms(8000),
                ms(8000)
            ]
        );
        b.reset();
        assert_eq!(b.peek(), ms(500));
        let mut quad = Backoff::new(ms(100), Duration::MAX).with_factor(4);
        assert_eq!(
            (quad.next_delay(), quad.next_delay(), quad.next_delay()),
            (ms(100), ms(400), ms(1600))
        );
        let mut flat = Backoff::new(ms(10), ms(10)).with_factor(0);
        assert_eq!((flat.next_delay(), flat.next_delay()), (ms(10), ms(10)));
    }
}
