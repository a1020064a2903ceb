//! The line a process prints on stdout once its listener is bound: `listening on <addr>`.
//!
//! A listen address with port 0 lets the operating system choose a free port when the listener
//! binds. Whoever started the process (pulsectl, the test harness) reads the port from this
//! line, so nobody picks a port in advance and hopes it is still free when the service binds it.

use std::io::Write;
use std::net::SocketAddr;

const PREFIX: &str = "listening on ";

/// Prints the bound address of this process's listener on stdout. A closed stdout is no
/// reason to stop: write errors are ignored.
pub fn announce(addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{PREFIX}{addr}");
    let _ = out.flush();
}

/// The address of one announcement line, if `line` is one.
pub fn parse(line: &str) -> Option<SocketAddr> {
    line.strip_prefix(PREFIX)?.trim().parse().ok()
}

/// The first address announced in `output` (a process's stdout, or a log holding it).
pub fn find(output: &str) -> Option<SocketAddr> {
    output.lines().find_map(parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_announcement_is_found_among_log_lines() {
        let output = "2026-01-01T00:00:00Z INFO health listener up addr=127.0.0.1:0\n\
                      listening on 127.0.0.1:41234\n\
                      listening on 127.0.0.1:9\n";
        assert_eq!(
            find(output),
            Some(SocketAddr::from(([127, 0, 0, 1], 41234)))
        );
        assert_eq!(parse("listening on [::1]:80"), "[::1]:80".parse().ok());
        assert_eq!(parse("listening on nowhere"), None);
        assert_eq!(find("nothing bound yet\n"), None);
    }
}
