//! The `api_requests_per_sec` quota: a fixed one-second window per tenant, counted in this
//! gateway's memory (so the limit holds per gateway replica; docs/tenants.md).
//!
//! The limit is read from the tenant's quotas at most every [`LIMIT_TTL`], so a request costs
//! no database read; setting quotas through the platform API forgets the cached limit at once on
//! the gateway that served it. The windows are this process's ([`QuotaRate`], held by the
//! gateway's state), so two gateways in one process (as tests run them) count apart.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pulse_domain::TenantId;
use pulse_domain::tenant::{Quota, QuotaExceeded};
use pulse_store::{Store, StoreError, quotas};

/// How long a tenant's limit is used before it is read again.
pub const LIMIT_TTL: Duration = Duration::from_secs(5);
const WINDOW: Duration = Duration::from_secs(1);
/// Tenants kept; beyond it, entries not seen for a window are dropped.
const KEPT: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Entry {
    limit: Option<u32>,
    read_at: Instant,
    window_start: Instant,
    count: u32,
}

/// This process's request-rate windows, per tenant.
#[derive(Debug, Default)]
pub struct QuotaRate {
    entries: Mutex<HashMap<TenantId, Entry>>,
}

/// A refusal: the quota and how long until the window frees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateRefusal {
    pub exceeded: QuotaExceeded,
    pub retry_after: Duration,
}

/// Counts one request in `entry`'s window at `now`.
fn count(entry: &mut Entry, now: Instant) -> Result<(), RateRefusal> {
    let Some(limit) = entry.limit else {
        return Ok(());
    };
    if now.saturating_duration_since(entry.window_start) >= WINDOW {
        entry.window_start = now;
        entry.count = 0;
    }
    if entry.count >= limit {
        let retry_after = WINDOW.saturating_sub(now.saturating_duration_since(entry.window_start));
        return Err(RateRefusal {
            exceeded: QuotaExceeded {
                quota: Quota::ApiRequestsPerSec,
                limit: u64::from(limit),
            },
            retry_after,
        });
    }
    entry.count += 1;
    Ok(())
}

impl QuotaRate {
    /// Admits one API request of `tenant`, or refuses it by the tenant's request-rate quota.
    pub async fn admit(
        &self,
        store: &Store,
        tenant: &TenantId,
    ) -> Result<Result<(), RateRefusal>, StoreError> {
        let now = Instant::now();
        let cached = {
            let map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            map.get(tenant)
                .filter(|e| now.saturating_duration_since(e.read_at) < LIMIT_TTL)
                .copied()
        };
        let limit = match cached {
            Some(entry) => entry.limit,
            None => {
                let tx = store.tenant_tx(tenant).await?;
                let limit = quotas::get(&tx).await?.api_requests_per_sec;
                tx.rollback().await?;
                limit
            }
        };
        let mut map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= KEPT {
            map.retain(|_, e| now.saturating_duration_since(e.window_start) < WINDOW);
        }
        let entry = map.entry(tenant.clone()).or_insert(Entry {
            limit,
            read_at: now,
            window_start: now,
            count: 0,
        });
        if cached.is_none() {
            entry.limit = limit;
            entry.read_at = now;
        }
        Ok(count(entry, now))
    }

    /// Drops the cached limit of `tenant` (after its quotas changed).
    pub fn forget(&self, tenant: &TenantId) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_admits_the_limit_then_refuses_until_it_passes() {
        let start = Instant::now();
        let mut entry = Entry {
            limit: Some(2),
            read_at: start,
            window_start: start,
            count: 0,
        };
        assert!(count(&mut entry, start).is_ok());
        assert!(count(&mut entry, start + Duration::from_millis(10)).is_ok());
        let refused = count(&mut entry, start + Duration::from_millis(400)).unwrap_err();
        assert_eq!(refused.exceeded.limit, 2);
        assert_eq!(refused.retry_after, Duration::from_millis(600));
        assert!(count(&mut entry, start + Duration::from_millis(1_000)).is_ok());
        let mut free = Entry {
            limit: None,
            ..entry
        };
        for _ in 0..1_000 {
            assert!(count(&mut free, start).is_ok());
        }
    }
}
