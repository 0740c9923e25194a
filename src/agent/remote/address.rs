//! Which hosts a tool may call: a URL's host read as a browser's URL parser reads it, and the
//! loopback, private and otherwise internal addresses refused in every literal form they can
//! take (`2130706433`, `0177.0.0.1`, `127.1`, `localhost.`, `[::ffff:127.0.0.1]`,
//! `[64:ff9b::7f00:1]`). Names are not resolved (the runtime has no DNS API), so a public name
//! that points inside is not caught here: the runtime's `fetch` does not reach private networks.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The host of an `http(s)://` URL, without port or brackets, percent-decoded and lower-cased.
/// Like the URL parser `fetch` uses, a `\` ends the authority as `/` does.
pub fn host_of(url: &str) -> Option<String> {
    let scheme = url
        .get(..8)
        .map(str::to_ascii_lowercase)
        .unwrap_or_default();
    let rest = if scheme.starts_with("https://") {
        &url[8..]
    } else if scheme.starts_with("http://") {
        &url[7..]
    } else {
        return None;
    };
    let authority = rest.split(['/', '\\', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        authority.split(':').next()?
    };
    let host = percent_encoding::percent_decode_str(host)
        .decode_utf8()
        .ok()?;
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Whether a tool may not call `host` unless the operator allows private hosts: `localhost`
/// and its subdomains, and the addresses of [`is_internal_v4`] and [`is_internal_v6`] in any
/// literal form. A host that is neither a plain ASCII name nor a valid address counts as
/// private: what `fetch` would make of it cannot be known here.
pub fn is_private_host(host: &str) -> bool {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return is_private_host(v6);
    }
    if host.contains(':') {
        return host.parse::<Ipv6Addr>().map_or(true, is_internal_v6);
    }
    // `localhost.` is `localhost`: a trailing dot makes a name fully qualified.
    let name = host.trim_end_matches('.');
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
        || name.is_empty()
    {
        return true;
    }
    match ipv4_of(host) {
        Some(Some(ip)) => is_internal_v4(ip),
        Some(None) => true,
        None => false,
    }
}

/// A host read as the URL standard reads IPv4 hosts: when its last label is a number, the host
/// is an address whose labels may be decimal, octal (`0177`) or hex (`0x7f`), and fewer than
/// four labels fill the last one's bytes (`127.1`, `2130706433`). `None`: a name, not an
/// address; `Some(None)`: an address that does not parse (`fetch` refuses it).
fn ipv4_of(host: &str) -> Option<Option<Ipv4Addr>> {
    let mut labels: Vec<&str> = host.split('.').collect();
    if labels.len() > 1 && labels.last() == Some(&"") {
        labels.pop();
    }
    let last = labels.last()?;
    let numeric = last.bytes().all(|b| b.is_ascii_digit())
        || last
            .strip_prefix("0x")
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if !numeric || last.is_empty() {
        return None;
    }
    let parsed = (|| {
        if labels.len() > 4 {
            return None;
        }
        let numbers: Vec<u64> = labels.iter().map(|l| number(l)).collect::<Option<_>>()?;
        let (last, init) = numbers.split_last()?;
        if init.iter().any(|&n| n > 255) || *last >= 1u64 << (8 * (5 - numbers.len())) {
            return None;
        }
        let high = init
            .iter()
            .enumerate()
            .fold(0u64, |acc, (i, &n)| acc | n << (8 * (3 - i)));
        u32::try_from(high | last).ok().map(Ipv4Addr::from)
    })();
    Some(parsed)
}

/// One label of an IPv4 host: `0x` hex, `0`-led octal, else decimal.
fn number(label: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = label.strip_prefix("0x") {
        (hex, 16)
    } else if label.len() > 1 && label.starts_with('0') {
        (&label[1..], 8)
    } else {
        (label, 10)
    };
    if digits.is_empty() {
        // `0x` alone is zero, as the standard reads it.
        return (radix == 16).then_some(0);
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .filter(|&n| n <= u32::MAX.into())
}

/// "This network" (`0.0.0.0/8`), loopback, private, shared (CGNAT), link-local, IETF protocol
/// assignments, benchmarking, multicast, reserved and broadcast addresses.
pub fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 168)
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 224
}

/// Unspecified, loopback, unique-local, link- and site-local and multicast addresses, and
/// every form that carries an IPv4 address inside (mapped, compatible, NAT64, 6to4, Teredo),
/// judged by that address.
pub fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if s[..6] == [0; 6] || (s[..5] == [0; 5] && s[5] == 0xffff) {
        // `::`, `::1`, `::a.b.c.d` (compatible) and `::ffff:a.b.c.d` (mapped).
        return s[6] == 0 && s[7] <= 1 || is_internal_v4(v4(s[6], s[7]));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && (s[2..6] == [0; 4] || s[2] == 1) {
        // NAT64: the well-known prefix and the local-use one.
        return is_internal_v4(v4(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return is_internal_v4(v4(s[1], s[2]));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        // Teredo: the client's address, inverted.
        return is_internal_v4(v4(!s[6], !s[7]));
    }
    (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
        || (s[0] >> 8) == 0xff
}

/// Checks a URL a tool is about to call: `http(s)`, and a public host unless `allow_private`.
pub fn check_url(url: &str, allow_private: bool) -> Result<(), String> {
    let host = host_of(url).ok_or_else(|| format!("`{url}` is not an http(s) URL"))?;
    if !allow_private && is_private_host(&host) {
        return Err(format!(
            "`{host}` is a private address; tools may call it only with ALLOW_PRIVATE_TOOL_HOSTS=true"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_as_a_url_parser_reads_them() {
        assert_eq!(
            host_of("https://api.example.com/v1?q=1").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            host_of("http://user:pw@10.0.0.1:8080/x").as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(host_of("http://[::1]:9/").as_deref(), Some("::1"));
        assert_eq!(
            host_of("HTTPS://API.Example.com").as_deref(),
            Some("api.example.com")
        );
        // `\` ends the authority, so what follows an `@` after it is not the host.
        assert_eq!(
            host_of("http://127.0.0.1\\@api.example.com/").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            host_of("http://%31%32%37.0.0.1/").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(host_of("ftp://example.com"), None);
    }

    #[test]
    fn every_literal_form_of_an_internal_address_is_private() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "224.0.0.1",
            "255.255.255.255",
            // The other ways to write 127.0.0.1 and 169.254.169.254.
            "2130706433",
            "0x7f000001",
            "0177.0.0.1",
            "0x7f.0.0.1",
            "127.1",
            "127.0.1",
            "127.0.0.1.",
            "2852039166",
            "0xa9fea9fe",
            "0",
            // Malformed numbers `fetch` would refuse anyway.
            "127.0.0.256",
            "1.2.3.4.5",
            "08.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:7f00:1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::127.0.0.1",
            "64:ff9b:1::a00:1",
            "2002:7f00:1::",
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            "[::1]",
            "not:an:address",
            "localhost",
            "localhost.",
            "localhost..",
            "db.localhost",
            "db.localhost.",
            "ａｐｉ.example.com",
            "a b",
            "",
        ] {
            assert!(is_private_host(private), "{private}");
        }
        for public in [
            "8.8.8.8",
            "134744072",
            "api.example.com",
            "api.example.com.",
            "2606:4700::1111",
            "64:ff9b::808:808",
            "2002:808:808::",
            "172.32.0.1",
            "1.1",
            "localhost.example.com",
            "x-1.example",
        ] {
            assert!(!is_private_host(public), "{public}");
        }
        assert!(check_url("http://127.0.0.1:9/x", false)
            .unwrap_err()
            .contains("ALLOW_PRIVATE_TOOL_HOSTS"));
        for url in [
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://127.1:8080/",
            "http://localhost./",
            "http://[::ffff:127.0.0.1]/",
            "http://[64:ff9b::7f00:1]/",
            "http://%6c%6f%63%61%6c%68%6f%73%74/",
            "http://127.0.0.1\\@api.example.com/",
        ] {
            assert!(check_url(url, false).is_err(), "{url}");
        }
        assert!(check_url("http://127.0.0.1:9/x", true).is_ok());
        assert!(check_url("https://api.example.com/x", false).is_ok());
    }
}
