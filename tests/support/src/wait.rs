//! Waiting on conditions with a deadline, never sleeping and hoping.

use std::future::Future;
use std::time::{Duration, Instant};

/// Polls `check` until it returns `Some`, or fails with `what` when `deadline` passes.
pub async fn until<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    let mut interval = Duration::from_millis(10);
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if start.elapsed() >= deadline {
            anyhow::bail!("timed out after {deadline:?} waiting for {what}");
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(Duration::from_millis(250));
    }
}
