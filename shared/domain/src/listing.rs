//! How many records one listing answers at most: the bound the store applies and the API
//! documents (a larger `limit` is refused, or capped where the API says so).

/// Actions.
pub const MAX_ACTIONS: i64 = 500;
/// Alerts.
pub const MAX_ALERTS: i64 = 1000;
/// Findings.
pub const MAX_FINDINGS: i64 = 500;
/// Patrol runs.
pub const MAX_PATROL_RUNS: i64 = 200;
