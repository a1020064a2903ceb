//! How long a retry waits: the one owner of every retry loop's pause.
//!
//! Attempt `n` (1-based) has the ceiling `initial * factor^(n-1)`, never above `max`. The delay is
//! drawn below the ceiling by the [`Jitter`], so processes that failed together (a relay or a
//! NATS server restarting under a whole fleet) come back spread out instead of all at once:
//!
//! - [`Jitter::Equal`] (the default): uniform in `[ceiling/2, ceiling]`; never under half the
//!   ceiling, so a loop cannot spin.
//! - [`Jitter::Full`]: uniform in `[0, ceiling]`; the widest spread, for many clients of one
//!   server.
//! - [`Jitter::None`]: the ceiling itself, for delays that are a documented setting (a JetStream
//!   Nak delay after delivery `n`) and must mean exactly what they say.
//!
//! Stateless use asks [`Backoff::delay`] for attempt `n` (a delivery count kept elsewhere);
//! a loop keeps the count in the value: [`Backoff::next_delay`] after each failure,
//! [`Backoff::reset`] after a success.

use std::time::Duration;

use rand::Rng;

/// How the delay is drawn below the ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jitter {
    /// The ceiling, exactly.
    None,
    /// Uniform in `[ceiling/2, ceiling]`.
    Equal,
    /// Uniform in `[0, ceiling]`.
    Full,
}

/// Exponential backoff with a bound and jitter; counts its own attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    factor: u32,
    jitter: Jitter,
    attempts: u32,
}

impl Backoff {
    /// Doubling from `initial` up to `max` (at least `initial`), with [`Jitter::Equal`].
    pub const fn new(initial: Duration, max: Duration) -> Self {
        let max = if max.as_nanos() < initial.as_nanos() {
            initial
        } else {
            max
        };
        Self {
            initial,
            max,
            factor: 2,
            jitter: Jitter::Equal,
            attempts: 0,
        }
    }

    /// Grows by `factor` per attempt (1: a constant delay; 0 counts as 1).
    pub const fn factor(mut self, factor: u32) -> Self {
        self.factor = if factor == 0 { 1 } else { factor };
        self
    }

    pub const fn jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    pub fn initial(&self) -> Duration {
        self.initial
    }

    pub fn max(&self) -> Duration {
        self.max
    }

    /// The largest delay of attempt `attempt` (1-based; 0 counts as 1):
    /// `initial * factor^(attempt-1)`, at most `max`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1);
        self.factor
            .checked_pow(exponent)
            .and_then(|growth| self.initial.checked_mul(growth))
            .map_or(self.max, |delay| delay.min(self.max))
    }

    /// The delay of attempt `attempt` (1-based), jittered below its ceiling.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_with(attempt, &mut rand::rng())
    }

    /// [`Backoff::delay`] with the random draws of `rng`.
    pub fn delay_with<R: Rng + ?Sized>(&self, attempt: u32, rng: &mut R) -> Duration {
        let ceiling = self.ceiling(attempt);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Equal => Duration::from_nanos(rng.random_range(nanos / 2..=nanos)),
            Jitter::Full => Duration::from_nanos(rng.random_range(0..=nanos)),
        }
    }

    /// Counts a failed attempt and returns the pause before the next one.
    pub fn next_delay(&mut self) -> Duration {
        self.attempts = self.attempts.saturating_add(1);
        self.delay(self.attempts)
    }

    /// A success: the next failure starts again from `initial`.
    pub fn reset(&mut self) {
        self.attempts = 0;
    }

    /// Failed attempts counted since the last [`Backoff::reset`].
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_ceiling_grows_by_the_factor_up_to_the_bound() {
        let b = Backoff::new(100 * MS, 1000 * MS);
        let ceilings: Vec<u128> = (0..=6).map(|n| b.ceiling(n).as_millis()).collect();
        assert_eq!(ceilings, [100, 100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.ceiling(u32::MAX), 1000 * MS);
        let tripling = b.clone().factor(3);
        assert_eq!(tripling.ceiling(3), 900 * MS);
        let constant = b.clone().factor(1);
        assert_eq!(constant.ceiling(40), 100 * MS);
        assert_eq!(b.clone().factor(0), constant);
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.ceiling(40), Duration::MAX);
    }

    #[test]
    fn the_bound_is_never_below_the_initial_delay() {
        let b = Backoff::new(3000 * MS, 1000 * MS);
        assert_eq!(b.max(), 3000 * MS);
        assert_eq!(b.ceiling(5), 3000 * MS);
    }

    #[test]
    fn no_jitter_is_the_ceiling_exactly() {
        let b = Backoff::new(1000 * MS, 60_000 * MS).jitter(Jitter::None);
        for attempt in 0..40 {
            assert_eq!(b.delay(attempt), b.ceiling(attempt));
        }
        let huge = Backoff::new(Duration::MAX, Duration::MAX).jitter(Jitter::None);
        assert_eq!(huge.delay(3), Duration::MAX);
    }

    #[test]
    fn jittered_delays_stay_within_their_bounds() {
        let mut rng = StdRng::seed_from_u64(7);
        let equal = Backoff::new(100 * MS, 5000 * MS);
        let full = equal.clone().jitter(Jitter::Full);
        for attempt in 1..30 {
            let ceiling = equal.ceiling(attempt);
            for _ in 0..50 {
                let d = equal.delay_with(attempt, &mut rng);
                assert!(
                    d >= ceiling / 2 && d <= ceiling,
                    "{d:?} outside equal bounds"
                );
                let d = full.delay_with(attempt, &mut rng);
                assert!(d <= ceiling, "{d:?} above the ceiling");
            }
        }
        // Past what a u64 of nanoseconds holds: still bounded, no panic.
        let huge = Backoff::new(Duration::MAX, Duration::MAX);
        assert!(huge.delay(2) >= Duration::from_nanos(u64::MAX / 2));
    }

    #[test]
    fn jitter_spreads_the_delays() {
        let mut rng = StdRng::seed_from_u64(11);
        for (jitter, lowest) in [(Jitter::Equal, 5000), (Jitter::Full, 0)] {
            let b = Backoff::new(10_000 * MS, 10_000 * MS).jitter(jitter);
            let draws: Vec<u128> = (0..400)
                .map(|_| b.delay_with(1, &mut rng).as_millis())
                .collect();
            let (min, max) = (draws.iter().min().unwrap(), draws.iter().max().unwrap());
            let span = 10_000 - lowest;
            // The draws cover most of their range: the low and the high tenth are both hit.
            assert!(*min < lowest + span / 10, "{jitter:?}: lowest draw {min}");
            assert!(*max > 10_000 - span / 10, "{jitter:?}: highest draw {max}");
            let distinct: std::collections::BTreeSet<_> = draws.iter().collect();
            assert!(
                distinct.len() > 300,
                "{jitter:?}: {} distinct",
                distinct.len()
            );
        }
    }

    #[test]
    fn next_delay_counts_attempts_and_reset_starts_over() {
        let mut b = Backoff::new(100 * MS, 800 * MS).jitter(Jitter::None);
        let delays: Vec<u128> = (0..5).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 800]);
        assert_eq!(b.attempts(), 5);
        b.reset();
        assert_eq!(b.attempts(), 0);
        assert_eq!(b.next_delay(), 100 * MS);

        let mut jittered = Backoff::new(100 * MS, 800 * MS);
        for _ in 0..3 {
            jittered.next_delay();
        }
        jittered.reset();
        let first = jittered.next_delay();
        assert!(first >= 50 * MS && first <= 100 * MS);
    }
}
