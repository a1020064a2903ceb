//! Scores one run observation against its manifest. (Interface; the scoring work owns it.)

use serde::{Deserialize, Serialize};

use crate::manifest::Manifest;
use crate::observation::RunObservation;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// Every gate held and there was no hard failure.
    pub passed: bool,
    pub hard_failures: Vec<String>,
    pub gate_failures: Vec<String>,
    /// Required faults detected / required faults.
    pub detected_faults: u32,
    pub required_faults: u32,
    pub false_positives: u32,
}

pub fn score(_manifest: &Manifest, _observation: &RunObservation) -> Score {
    todo!("scorer")
}
