//! Which URLs `curl` and `wget` may fetch: `http` and `https` only, with a host that is neither
//! link-local nor a cloud metadata service, in any spelling of its address.
//!
//! The host is read the way a URL parser and `inet_aton` read it, so the spellings that reach
//! the same address are refused alike: `169.254.169.254`, `2852039166`, `0xa9fea9fe`,
//! `0251.0376.0251.0376`, `169.254.43518`, `[::ffff:169.254.169.254]`, `[::ffff:a9fe:a9fe]`,
//! `[fd00:ec2::254]`, `[fe80::1]`, `metadata.google.internal.`. A URL that cannot be read
//! without doubt (user info, `%`-escapes or a backslash in the authority, curl's `{}` and `[]`
//! globs) is refused rather than guessed at.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Host names of metadata services.
const METADATA_NAMES: &[&str] = &[
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.internal",
];

/// Metadata addresses outside the link-local ranges.
const METADATA_V4: &[Ipv4Addr] = &[
    // Alibaba Cloud
    Ipv4Addr::new(100, 100, 100, 200),
    // Oracle Cloud (besides 169.254.169.254)
    Ipv4Addr::new(192, 0, 0, 192),
];
/// The EC2 metadata service over IPv6.
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

/// Why `url` may not be fetched; `None` when it may.
pub fn refusal(url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))
    else {
        return Some(format!(
            "{url:?} is not an http:// or https:// URL (no other scheme is fetched)"
        ));
    };
    if url.contains(['{', '}', '\\', ' ']) {
        return Some(format!(
            "{url:?} holds `{{`, `}}`, `\\` or a space, which curl would expand or read differently"
        ));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains(['@', '%']) {
        return Some(format!(
            "{url:?}: user information and escapes in the host are not accepted; name the host plainly"
        ));
    }
    let (host, after_host) = if let Some(inner) = authority.strip_prefix('[') {
        match inner.split_once(']') {
            Some((host, after)) => (host, after),
            None => return Some(format!("{url:?}: an unclosed `[`")),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, port),
            None => (authority, ""),
        }
    };
    // Brackets anywhere but around an IPv6 host are curl globs.
    let bracketed_host = authority.starts_with('[');
    if (!bracketed_host && host.contains(['[', ']']))
        || after_host.contains(['[', ']'])
        || rest[authority.len()..].contains(['[', ']'])
    {
        return Some(format!(
            "{url:?} holds `[` or `]` outside an IPv6 host, which curl expands as a glob"
        ));
    }
    if host.is_empty() {
        return Some(format!("{url:?} names no host"));
    }
    host_refusal(host).map(|why| format!("{url:?}: {why}"))
}

/// Why `host` (a name or an address, IPv6 without its brackets) may not be reached.
pub fn host_refusal(host: &str) -> Option<String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if METADATA_NAMES.contains(&host.as_str()) {
        return Some(format!("{host} is a cloud metadata service"));
    }
    let address = if host.contains(':') {
        IpAddr::V6(host.parse::<Ipv6Addr>().ok()?)
    } else {
        IpAddr::V4(parse_ipv4(&host)?)
    };
    forbidden(address)
        .then(|| format!("{host} is a link-local or metadata address ({address}), never fetched"))
}

fn forbidden(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_link_local() || METADATA_V4.contains(&v4),
        IpAddr::V6(v6) => {
            let segments = v6.segments();
            let embedded = v6.to_ipv4_mapped().or_else(|| {
                // IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::a.b.c.d) forms.
                let octets = v6.octets();
                let v4 = Ipv4Addr::new(octets[12], octets[13], octets[14], octets[15]);
                let compatible = segments[..6] == [0, 0, 0, 0, 0, 0];
                let nat64 = segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
                (compatible || nat64).then_some(v4)
            });
            v6 == METADATA_V6
                || (segments[0] & 0xffc0) == 0xfe80
                || embedded.is_some_and(|v4| forbidden(IpAddr::V4(v4)))
        }
    }
}

/// An IPv4 address in every form `inet_aton` (and so curl and wget) reads: one to four parts,
/// each decimal, octal (`0` prefix) or hex (`0x`), the last filling the remaining bytes.
fn parse_ipv4(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut numbers = Vec::with_capacity(parts.len());
    for part in &parts {
        let (digits, radix) =
            if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
                (hex, 16)
            } else if part.len() > 1 && part.starts_with('0') {
                (&part[1..], 8)
            } else {
                (*part, 10)
            };
        if digits.is_empty() && radix != 16 {
            return None;
        }
        let number = if digits.is_empty() {
            0
        } else {
            u64::from_str_radix(digits, radix).ok()?
        };
        numbers.push(number);
    }
    let (last, leading) = numbers.split_last()?;
    if leading.iter().any(|n| *n > 255) {
        return None;
    }
    let last_bytes = 4 - leading.len();
    if *last >= 1u64 << (8 * last_bytes) {
        return None;
    }
    let mut value: u64 = 0;
    for n in leading {
        value = (value << 8) | n;
    }
    value = (value << (8 * last_bytes)) | last;
    Some(Ipv4Addr::from(u32::try_from(value).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_metadata_address_is_refused() {
        for url in [
            "http://169.254.169.254/latest/meta-data/",
            "http://169.254.169.254:80/",
            "http://169.254.170.2/v2/credentials",
            "http://169.254.0.1",
            "HTTP://169.254.169.254/",
            "http://2852039166/",
            "http://0xa9fea9fe/",
            "http://0xA9FEA9FE/",
            "http://0251.0376.0251.0376/",
            "http://0xa9.0xfe.0xa9.0xfe/",
            "http://169.254.43518/",
            "http://169.16689662/",
            "http://[::ffff:169.254.169.254]/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[::169.254.169.254]/",
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[fd00:ec2::254]/latest/meta-data/",
            "http://[FD00:EC2:0:0:0:0:0:254]/",
            "http://[fe80::1]/",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://metadata.google.internal./",
            "http://METADATA.GOOGLE.INTERNAL/",
            "http://metadata/",
            "http://100.100.100.200/latest/meta-data/",
            "https://evil@169.254.169.254/",
            "http://user:pw@example.com/",
            "http://169.254.169.254%2f/",
            "http://example.com\\@169.254.169.254/",
            "http://169.254.169.{253,254}/",
            "http://169.254.169.25[0-9]/",
            "http://example.com/[1-9]",
            "http://example.com 169.254.169.254/",
            "file:///etc/shadow",
            "ftp://example.com/x",
            "gopher://127.0.0.1:6379/_FLUSHALL",
            "dict://127.0.0.1:11211/stats",
            "smtp://mail.example.com",
            "telnet://127.0.0.1:23",
            "ldap://example.com",
            "example.com",
            "http://",
        ] {
            assert!(refusal(url).is_some(), "{url} should be refused");
        }
        for url in [
            "http://127.0.0.1:8080/health",
            "https://example.com",
            "http://localhost:9090/metrics",
            "http://10.0.0.5/",
            "http://[::1]:8080/",
            "http://169.253.1.1/",
            "http://[2001:db8::1]/",
            "https://example.com/search?q=a#top",
        ] {
            assert_eq!(refusal(url), None, "{url} should be fetched");
        }
    }
}
