//! Per-agent report rate: a token bucket.

use std::time::Instant;

/// Allows `per_sec` reports a second on average and bursts of `4 * per_sec`.
#[derive(Debug, Clone)]
pub struct ReportBudget {
    capacity: f64,
    per_sec: f64,
    tokens: f64,
    last: Instant,
}

impl ReportBudget {
    pub fn new(per_sec: u32, now: Instant) -> Self {
        let per_sec = f64::from(per_sec.max(1));
        Self {
            capacity: per_sec * 4.0,
            per_sec,
            tokens: per_sec * 4.0,
            last: now,
        }
    }

    /// Takes one report from the budget; false when the agent is over its rate.
    pub fn try_take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.per_sec).min(self.capacity);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn bursts_then_refills_at_the_rate() {
        let start = Instant::now();
        let mut budget = ReportBudget::new(2, start);
        assert!((0..8).all(|_| budget.try_take(start)));
        assert!(!budget.try_take(start));
        assert!(!budget.try_take(start + Duration::from_millis(400)));
        assert!(budget.try_take(start + Duration::from_millis(600)));
        // Refill is capped at the burst size.
        let later = start + Duration::from_secs(3600);
        assert!((0..8).all(|_| budget.try_take(later)));
        assert!(!budget.try_take(later));
    }
}
