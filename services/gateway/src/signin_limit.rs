//! The web UI's state kept between requests: the failed sign-ins per client address. A leaf
//! module, so the application state can hold it without importing the pages.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What the web UI keeps between requests.
#[derive(Debug, Default)]
pub struct WebState {
    pub limiter: AddressLimiter,
}

/// Failed sign-ins one address may make within [`ADDRESS_WINDOW`].
pub const MAX_FAILURES_PER_ADDRESS: usize = 20;
const ADDRESS_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Failed sign-ins per client address, on this gateway.
#[derive(Debug, Default)]
pub struct AddressLimiter {
    failures: Mutex<HashMap<IpAddr, VecDeque<Instant>>>,
}

impl AddressLimiter {
    /// `Some(wait)` when `address` has used up its failures.
    pub fn blocked(&self, address: IpAddr, now: Instant) -> Option<Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let list = failures.get_mut(&address)?;
        while list
            .front()
            .is_some_and(|at| now.duration_since(*at) >= ADDRESS_WINDOW)
        {
            list.pop_front();
        }
        if list.len() >= MAX_FAILURES_PER_ADDRESS {
            list.front()
                .map(|oldest| ADDRESS_WINDOW.saturating_sub(now.duration_since(*oldest)))
        } else {
            None
        }
    }

    pub fn record(&self, address: IpAddr, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        // Bound the map: forget addresses whose failures have all aged out.
        if failures.len() > 10_000 {
            failures.retain(|_, list| {
                list.back()
                    .is_some_and(|at| now.duration_since(*at) < ADDRESS_WINDOW)
            });
        }
        failures.entry(address).or_default().push_back(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_limited_after_its_failures_and_freed_by_the_window() {
        let limiter = AddressLimiter::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let start = Instant::now();
        for _ in 0..MAX_FAILURES_PER_ADDRESS {
            assert_eq!(limiter.blocked(ip, start), None);
            limiter.record(ip, start);
        }
        assert!(limiter.blocked(ip, start).is_some());
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        assert_eq!(limiter.blocked(other, start), None);
        assert_eq!(limiter.blocked(ip, start + ADDRESS_WINDOW), None);
    }
}
