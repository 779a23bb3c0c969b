//! The bodies of `ct timeout` and `ct expectation` objects, as weir evaluates them.
//!
//! `ct timeout NAME { protocol tcp; l3proto ip; policy = { established: 2m3s, close: 12s } }`:
//! the state names nft accepts for the protocol (TCP's eleven, UDP's `unreplied`/`replied`,
//! ICMP's `timeout`), times as nft writes them or seconds. `ct expectation NAME { protocol tcp;
//! dport 1234; timeout 2m; size 12; [l3proto ip] }`. A body weir cannot evaluate (another
//! protocol, a state it does not know) gives None: the rules naming the object stay "not
//! evaluated yet".

use crate::ast::{MapData, Val};
use crate::ir::{CtExpectation, CtTimeoutPolicy};
use crate::values::parse_time_ms;

use super::tables::other_text;

/// The states of a protocol's timeout policy, as nft names them.
pub(crate) fn timeout_states(l4proto: u8) -> &'static [&'static str] {
    match l4proto {
        6 => &[
            "syn_sent",
            "syn_recv",
            "established",
            "fin_wait",
            "close_wait",
            "last_ack",
            "time_wait",
            "close",
            "syn_sent2",
            "retrans",
            "unack",
        ],
        17 | 136 => &["unreplied", "replied"],
        1 | 58 => &["timeout"],
        _ => &[],
    }
}

fn l4_number(w: &str) -> Option<u8> {
    Some(match w {
        "tcp" => 6,
        "udp" => 17,
        "udplite" => 136,
        "icmp" => 1,
        "icmpv6" | "ipv6-icmp" => 58,
        _ => return None,
    })
}

/// The word after `key` in an object's body.
fn after<'a>(body: &'a [Val], key: &str) -> Option<&'a Val> {
    let i = body
        .iter()
        .position(|v| matches!(v, Val::Word(w, _) if w == key))?;
    body.get(i + 1)
}

pub(super) fn timeout_policy(body: &[Val]) -> Option<CtTimeoutPolicy> {
    let l4proto = l4_number(&other_text(after(body, "protocol")?))?;
    let states = timeout_states(l4proto);
    let mut values = Vec::new();
    if let Some(Val::Set(elems, _)) = after(body, "policy") {
        for e in elems {
            let (state, time) = match (&e.key, &e.data) {
                (k, Some(MapData::Value(v))) => (other_text(k), other_text(v)),
                _ => return None,
            };
            if !states.contains(&state.as_str()) {
                return None;
            }
            values.push((state, parse_time_ms(&time).ok()?));
        }
    }
    Some(CtTimeoutPolicy { l4proto, values })
}

pub(super) fn expectation(body: &[Val]) -> Option<CtExpectation> {
    let l4proto = l4_number(&other_text(after(body, "protocol")?))?;
    let dport: u16 = other_text(after(body, "dport")?).parse().ok()?;
    let timeout_ms = parse_time_ms(&other_text(after(body, "timeout")?)).ok()?;
    let size: u8 = other_text(after(body, "size")?).parse().ok()?;
    Some(CtExpectation {
        l4proto,
        dport,
        timeout_ms,
        size,
    })
}

/// A `synproxy` object's body (`mss N`, `wscale N`, `timestamp`, `sack-perm`, in any order):
/// each setting present sets its flag, as nft's parser does.
pub(super) fn synproxy(body: &[Val]) -> Option<crate::ir::Synproxy> {
    use crate::ir::Synproxy as S;
    let mut s = S::default();
    let mut words = body.iter().map(other_text);
    while let Some(w) = words.next() {
        match w.as_str() {
            "mss" => {
                s.mss = words.next()?.parse().ok()?;
                s.flags |= S::MSS;
            }
            "wscale" => {
                s.wscale = words.next()?.parse().ok()?;
                s.flags |= S::WSCALE;
            }
            "timestamp" => s.flags |= S::TIMESTAMP,
            "sack-perm" => s.flags |= S::SACK_PERM,
            _ => {}
        }
    }
    Some(s)
}
