//! Pulse capabilities: the vocabulary every surface shares (tool names, schemas, execution
//! profiles and the stable error-code table). Step 1 holds the error codes.

pub mod error_codes;

pub use error_codes::ErrorCode;
