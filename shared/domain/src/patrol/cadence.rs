//! The Patrol cadence grid: when a tenant's scheduled full runs fall due.
//!
//! Due times sit on a grid anchored at the Unix epoch, offset per tenant by a stable hash of its
//! id, and each slot moves by a deterministic jitter within +-`jitter_pct` of the interval. The
//! schedule depends only on the tenant id, the interval and the jitter, so every replica, a
//! restarted scheduler and the status API compute the same slots, and tenants spread evenly.

use chrono::{DateTime, TimeZone, Utc};

use crate::TenantId;

/// Largest jitter, percent of the interval (keeps slots in order: jitter stays under half an
/// interval).
pub const MAX_JITTER_PCT: u32 = 40;
/// Shortest interval the grid accepts, in milliseconds.
pub const MIN_INTERVAL_MS: u64 = 1_000;

/// One tenant-independent cadence: interval and jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    interval_ms: u64,
    jitter_pct: u32,
}

impl Cadence {
    /// Clamps the interval to at least [`MIN_INTERVAL_MS`] and the jitter to
    /// [`MAX_JITTER_PCT`].
    pub fn new(interval_ms: u64, jitter_pct: u32) -> Self {
        Self {
            interval_ms: interval_ms.clamp(MIN_INTERVAL_MS, i64::MAX as u64 / 4),
            jitter_pct: jitter_pct.min(MAX_JITTER_PCT),
        }
    }

    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    pub fn jitter_pct(&self) -> u32 {
        self.jitter_pct
    }

    /// The due time of cycle `k` (milliseconds since the epoch) for a tenant hash: grid slot
    /// plus jitter.
    pub fn slot_ms(&self, hash: u64, k: i64) -> i64 {
        let interval = self.interval_ms as i64;
        let offset = (hash % self.interval_ms) as i64;
        let span = interval * i64::from(self.jitter_pct) / 100;
        let jitter = if span == 0 {
            0
        } else {
            (mix(hash ^ (k as u64)) % (2 * span as u64 + 1)) as i64 - span
        };
        k * interval + offset + jitter
    }

    /// The first due slot strictly after `after_ms` for a tenant hash.
    pub fn slot_after_ms(&self, hash: u64, after_ms: i64) -> i64 {
        let interval = self.interval_ms as i64;
        let offset = (hash % self.interval_ms) as i64;
        // Jitter is under half an interval, so the answer is within two cycles of this one.
        let mut k = (after_ms - offset).div_euclid(interval) - 1;
        loop {
            let due = self.slot_ms(hash, k);
            if due > after_ms {
                return due;
            }
            k += 1;
        }
    }

    /// The tenant's first due slot strictly after `after`.
    pub fn next_after(&self, tenant: &TenantId, after: DateTime<Utc>) -> DateTime<Utc> {
        let due = self.slot_after_ms(tenant_hash(tenant), after.timestamp_millis());
        Utc.timestamp_millis_opt(due)
            .single()
            .unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

/// FNV-1a of the tenant id: stable across builds and platforms, unlike the std hasher.
pub fn tenant_hash(tenant: &TenantId) -> u64 {
    tenant
        .as_str()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

/// A 64-bit finalizer (splitmix64) spreading consecutive inputs over the whole range.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    #[test]
    fn next_slots_are_increasing_one_interval_apart_within_jitter() {
        let cadence = Cadence::new(300_000, 10);
        let t = tenant("acme");
        let start = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        let mut at = start;
        let mut previous: Option<DateTime<Utc>> = None;
        for _ in 0..50 {
            let next = cadence.next_after(&t, at);
            assert!(next > at);
            if let Some(prev) = previous {
                let gap = (next - prev).num_milliseconds();
                // One interval plus or minus twice the jitter span.
                assert!((240_000..=360_000).contains(&gap), "gap {gap}");
            }
            previous = Some(next);
            at = next;
        }
        // Deterministic: the same question has the same answer.
        assert_eq!(cadence.next_after(&t, start), cadence.next_after(&t, start));
    }

    #[test]
    fn tenants_are_spread_over_the_interval() {
        let cadence = Cadence::new(60_000, 0);
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap();
        let mut buckets = [0usize; 6];
        for i in 0..600 {
            let next = cadence.next_after(&tenant(&format!("t{i}")), at);
            let offset = (next - at).num_milliseconds();
            assert!((1..=60_000).contains(&offset));
            buckets[((offset - 1) / 10_000) as usize] += 1;
        }
        for count in buckets {
            assert!((50..=150).contains(&count), "uneven spread {buckets:?}");
        }
    }

    #[test]
    fn out_of_range_settings_are_clamped() {
        let cadence = Cadence::new(1, 99);
        assert_eq!(cadence.interval_ms(), MIN_INTERVAL_MS);
        assert_eq!(cadence.jitter_pct(), MAX_JITTER_PCT);
    }
}
