//! Restart backoff: doubling from an initial delay up to a ceiling, reset after a run that
//! lasted long enough to count as healthy.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max: max.max(initial),
        }
    }

    /// The pause before restart number `failures` (1 = the first restart in a row).
    pub fn delay(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(31);
        self.initial
            .checked_mul(1_u32 << exponent)
            .map_or(self.max, |d| d.min(self.max))
    }

    /// A run at least this long resets the consecutive-failure count.
    pub fn stable_after(&self) -> Duration {
        self.max.max(Duration::from_secs(10))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_ceiling() {
        let b = Backoff::new(Duration::from_millis(500), Duration::from_secs(5));
        let delays: Vec<u64> = (1..=7).map(|n| b.delay(n).as_millis() as u64).collect();
        assert_eq!(delays, vec![500, 1000, 2000, 4000, 5000, 5000, 5000]);
        assert_eq!(b.delay(0), Duration::from_millis(500));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn ceiling_never_below_initial() {
        let b = Backoff::new(Duration::from_secs(3), Duration::from_secs(1));
        assert_eq!(b.delay(4), Duration::from_secs(3));
        assert_eq!(b.stable_after(), Duration::from_secs(10));
    }
}
