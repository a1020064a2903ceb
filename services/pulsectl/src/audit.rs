//! `pulsectl audit verify` over `GET /api/audit/verify`: the gateway recomputes the tenant's
//! hash-chained audit log; a break is printed and makes the command fail (exit 1).

use pulse_api::audit::{ChainBreak, VerifyView};

use crate::gateway_client::{ApiError, GatewayClient, print_json};
use crate::text::wire_name;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The chain did not verify; the report was printed.
    #[error("the audit chain failed verification")]
    Broken,
}

impl AuditError {
    /// 1 for a broken chain; for API errors as for the other API commands (2 when refused).
    pub fn exit_code(&self) -> u8 {
        match self {
            AuditError::Api(err) => crate::patrol::exit_code(err),
            AuditError::Broken => 1,
        }
    }
}

/// What a break reason means, for the one-line report.
fn explain_reason(reason: Option<ChainBreak>) -> &'static str {
    match reason {
        Some(ChainBreak::MissingRow) => "a row is missing (deleted)",
        Some(ChainBreak::PrevHashMismatch) => "the row does not chain from the previous row",
        Some(ChainBreak::RowHashMismatch) => "the row was altered after it was written",
        Some(ChainBreak::HeadMismatch) => {
            "rows were removed from the end or the head was rewritten"
        }
        None => "the chain does not verify there",
    }
}

/// The report as one line.
pub fn describe(report: &VerifyView) -> String {
    if report.ok {
        return format!("audit chain intact: {} entries", report.entries);
    }
    let at = report
        .first_broken_seq
        .map_or_else(|| "-".to_owned(), |seq| seq.to_string());
    let reason = report
        .reason
        .as_ref()
        .map_or_else(|| "unknown".to_owned(), wire_name);
    format!(
        "audit chain BROKEN at entry {at}: {reason} ({}); {} entries before it verify",
        explain_reason(report.reason),
        report.entries
    )
}

/// `audit verify [--json]`; with `--json` the answer is printed as JSON and the exit status
/// still tells a break.
pub async fn verify(client: &GatewayClient, json: bool) -> Result<(), AuditError> {
    let report = client.api().verify_audit().await.map_err(ApiError::from)?;
    if json {
        print_json(&report);
    } else {
        println!("{}", describe(&report));
    }
    if report.ok {
        Ok(())
    } else {
        Err(AuditError::Broken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(value: serde_json::Value) -> VerifyView {
        serde_json::from_value(value).expect("a report")
    }

    #[test]
    fn intact_and_broken_chains_read_as_one_line() {
        let intact = report(serde_json::json!({"ok": true, "entries": 7}));
        assert_eq!(describe(&intact), "audit chain intact: 7 entries");
        let broken = report(serde_json::json!({
            "ok": false, "entries": 2, "first_broken_seq": 3, "reason": "row_hash_mismatch"
        }));
        assert_eq!(
            describe(&broken),
            "audit chain BROKEN at entry 3: row_hash_mismatch (the row was altered after it was \
             written); 2 entries before it verify"
        );
        assert_eq!(AuditError::Broken.exit_code(), 1);
    }
}
