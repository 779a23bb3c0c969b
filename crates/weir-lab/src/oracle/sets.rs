//! The named sets of a `.t` file (`!set1 type ipv4_addr flags interval;ok`, `?set1 192.168.3.4,
//! 10.0.0.0/8;ok`) that a block's lookups name: their elements, as the rule's table declares
//! them (`set set1 { type ...; flags ...; elements = { ... } }`), read into the register bytes
//! a lookup compares. Only network-order key types (addresses, ports, protocol numbers) and
//! their concatenations; maps are left out.

use super::bytecode::{Block, Elem};
use std::net::{Ipv4Addr, Ipv6Addr};

/// The declaration of set `name` in a table's text: (type words, flags words, elements).
fn declaration(text: &str, name: &str) -> Option<(String, String, Vec<String>)> {
    let head = format!("set {name} {{");
    let start = text.find(&head)? + head.len();
    let body = &text[start..];
    let end = body.find("\n  }")?;
    let body = &body[..end];
    let mut ty = String::new();
    let mut flags = String::new();
    let mut elems = Vec::new();
    for l in body.lines() {
        let l = l.trim().trim_end_matches(';');
        if let Some(t) = l.strip_prefix("type ") {
            ty = t.trim().to_string();
        } else if let Some(f) = l.strip_prefix("flags ") {
            flags = f.trim().to_string();
        } else if let Some(e) = l.strip_prefix("elements = {") {
            let e = e.trim().trim_end_matches('}');
            elems = e
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect();
        } else if l.starts_with("typeof ") {
            return None;
        }
    }
    Some((ty, flags, elems))
}

/// One component value: its bytes (network order) and, for a prefix or range, the last value.
fn component(ty: &str, s: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    if let Some((a, b)) = s.split_once('-') {
        let (lo, _) = component(ty, a.trim())?;
        let (_, hi) = component(ty, b.trim())?;
        return Some((lo, hi));
    }
    let (v, plen) = match s.split_once('/') {
        Some((v, p)) => (v, Some(p.parse::<u32>().ok()?)),
        None => (s, None),
    };
    let (bytes, bits): (Vec<u8>, u32) = match ty {
        "ipv4_addr" => (v.parse::<Ipv4Addr>().ok()?.octets().to_vec(), 32),
        "ipv6_addr" => (v.parse::<Ipv6Addr>().ok()?.octets().to_vec(), 128),
        "inet_service" => (v.parse::<u16>().ok()?.to_be_bytes().to_vec(), 16),
        "inet_proto" => (
            vec![match v {
                "tcp" => 6,
                "udp" => 17,
                "icmp" => 1,
                v => v.parse::<u8>().ok()?,
            }],
            8,
        ),
        _ => return None,
    };
    let Some(p) = plen else {
        return Some((bytes.clone(), bytes));
    };
    if p > bits {
        return None;
    }
    let mut lo = bytes.clone();
    let mut hi = bytes;
    for i in 0..lo.len() {
        for b in 0..8 {
            let bit = (i * 8 + b) as u32;
            if bit >= p {
                lo[i] &= !(0x80 >> b);
                hi[i] |= 0x80 >> b;
            }
        }
    }
    Some((lo, hi))
}

fn pad(mut v: Vec<u8>) -> Vec<u8> {
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

/// Fill the named sets of a block from the rule's table text; Err: why it cannot.
pub fn fill(b: &mut Block, text: &str) -> Result<(), String> {
    for s in b.sets.iter_mut() {
        let Some(host) = s.named else {
            continue;
        };
        if host {
            return Err("named set with a host-order key".into());
        }
        let (ty, _flags, elems) =
            declaration(text, &s.name).ok_or_else(|| "named set not declared".to_string())?;
        if ty.contains(" : ") {
            return Err("named map".into());
        }
        let types: Vec<&str> = ty.split(" . ").map(str::trim).collect();
        s.elems.clear();
        for e in elems {
            // `192.168.3.4 timeout 30s`: the element
            let e = e.split(" timeout ").next().unwrap_or("").trim();
            if e == "*" {
                // the catch-all: holds every key no other element does
                let mut c = Elem::range(Vec::new(), Vec::new(), Vec::new());
                c.end = None;
                c.catchall = true;
                s.catchall = Some(c);
                continue;
            }
            let parts: Vec<&str> = e.split(" . ").map(str::trim).collect();
            if parts.len() != types.len() {
                return Err(format!("named set element {e}"));
            }
            let mut key = Vec::new();
            let mut end = Vec::new();
            let mut comps = Vec::new();
            for (t, p) in types.iter().zip(&parts) {
                let (lo, hi) = component(t, p).ok_or_else(|| format!("named set of type {t}"))?;
                let (lo, hi) = (pad(lo), pad(hi));
                comps.push(lo.len());
                key.extend(lo);
                end.extend(hi);
            }
            s.elems.push(Elem::range(key, end, comps));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components() {
        assert_eq!(
            component("ipv4_addr", "10.0.0.0/8"),
            Some((vec![10, 0, 0, 0], vec![10, 255, 255, 255]))
        );
        assert_eq!(
            component("inet_service", "22-23"),
            Some((vec![0, 22], vec![0, 23]))
        );
        let (lo, hi) = component("ipv6_addr", "dead::/64").unwrap();
        assert_eq!(lo[..2], [0xde, 0xad]);
        assert_eq!(hi[8..], [0xff; 8]);
    }
}
