use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!("pulse-mcp: the MCP adapter is not part of this build yet; use the HTTP API");
    ExitCode::from(2)
}
