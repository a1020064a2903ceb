//! Patrol run admission, pure parts: run records and their state machine, run request scope,
//! the alert-trigger policy and the status projection. No IO and no clock: time is passed in.

pub mod budget;
pub mod cadence;
pub mod outcome;
pub mod readiness;
pub mod run;
pub mod scope;
pub mod status;
pub mod trigger;
