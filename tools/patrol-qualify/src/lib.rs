//! patrol-qualify: proves what Patrol with a given model route catches. It builds a disposable
//! lab (supervised processes, or Docker containers), injects real faults that Pulse sees only
//! through normal collection, runs a scoped Patrol run, scores the outcome against ground truth
//! the scenario owns and an out-of-band oracle confirms, checks nothing else changed, cleans up
//! twice, and gates any recommendation on 95% Wilson lower bounds.
//!
//! Module owners: [`manifest`] (types), [`catalogue`] and [`validate`] (loading, digests,
//! semantic rules), [`placeholder`] (the `${...}` vocabulary of manifests and its one
//! substitution), [`lab`] (drivers and oracle probes), [`client`] (the Pulse API), [`runner`]
//! (one live run), [`scorer`] and [`wilson`] (scores and gates), [`report`], [`replay`],
//! [`compare`] and [`contribution`] (artifacts).

pub mod catalogue;
pub mod children;
pub mod cli;
pub mod client;
pub mod compare;
pub mod contribution;
pub mod duration;
pub mod lab;
pub mod manifest;
pub mod observation;
pub mod placeholder;
pub mod replay;
pub mod report;
pub mod runner;
pub mod scorer;
pub mod validate;
pub mod wilson;
