//! nftables' packet traces as the kernel sends them: `NFT_MSG_TRACE` messages of the
//! `NFNLGRP_NFTRACE` multicast group, the events `nft monitor trace` prints. A chain that sets
//! `meta nftrace set 1` makes every later chain the packet goes through say what became of
//! it: a rule that ran to its end (with its verdict, `continue` included), or the chain's
//! policy. That is how the lab learns, packet by packet, whether the kernel matched a rule,
//! without changing the rule.

use crate::sys;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// `NFNLGRP_NFTRACE` (linux/netfilter/nfnetlink.h).
pub const NFNLGRP_NFTRACE: u32 = 9;
/// `(NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_TRACE`.
const MSG_TRACE: u16 = (10 << 8) | 17;

/// `enum nft_trace_types`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The chain's policy decided (no rule ended the chain).
    Policy,
    /// A `return` (or the end of a regular chain).
    Return,
    /// A rule ran to its end.
    Rule,
    Other(u32),
}

/// One trace event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The same for every event of one packet (a hash of the skb).
    pub id: u32,
    pub kind: Kind,
    /// `NFPROTO_*` of the table (nfgenmsg family).
    pub family: u8,
    pub table: String,
    pub chain: String,
    pub handle: Option<u64>,
    /// `NFTA_VERDICT_CODE`: NF_DROP 0, NF_ACCEPT 1, NF_QUEUE 3, NFT_CONTINUE -1, NFT_JUMP -3 ...
    pub verdict: Option<i32>,
    /// The first bytes of the link-layer, network and transport headers (20, 40, 20 at most),
    /// sent with the first event of each chain the packet enters.
    pub ll: Vec<u8>,
    pub nh: Vec<u8>,
    pub th: Vec<u8>,
    pub iif: Option<u32>,
    pub oif: Option<u32>,
    pub mark: Option<u32>,
    /// The packet's connection, with the packet's headers (kernels since 6.13, when
    /// conntrack is loaded): `ct state` bits (`NF_CT_STATE_BIT(ctinfo)`, 64 untracked; None:
    /// no entry), direction, status.
    pub ct_state: Option<u32>,
    pub ct_dir: Option<u8>,
    pub ct_status: Option<u32>,
}

impl Event {
    /// The verdict as nft prints it.
    pub fn verdict_name(&self) -> String {
        match self.verdict {
            Some(0) => "drop".into(),
            Some(1) => "accept".into(),
            Some(2) => "stolen".into(),
            Some(3) => "queue".into(),
            Some(-1) => "continue".into(),
            Some(-3) => "jump".into(),
            Some(-4) => "goto".into(),
            Some(-5) => "return".into(),
            Some(v) => format!("verdict {v}"),
            None => "none".into(),
        }
    }
}

/// The attributes of a netlink message body: (type without the flag bits, payload).
fn attrs(mut b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while b.len() >= 4 {
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let typ = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff;
        if len < 4 || len > b.len() {
            break;
        }
        out.push((typ, &b[4..len]));
        let next = (len + 3) & !3;
        b = &b[next.min(b.len())..];
    }
    out
}

fn be32(b: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(..4)?.try_into().ok()?))
}

fn string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The trace events of one netlink datagram (other messages are left out).
pub fn parse(mut dgram: &[u8]) -> Vec<Event> {
    let mut out = Vec::new();
    while dgram.len() >= 16 {
        let len = u32::from_ne_bytes([dgram[0], dgram[1], dgram[2], dgram[3]]) as usize;
        let typ = u16::from_ne_bytes([dgram[4], dgram[5]]);
        if len < 16 || len > dgram.len() {
            break;
        }
        let msg = &dgram[16..len];
        if typ == MSG_TRACE && msg.len() >= 4 {
            let mut e = Event {
                id: 0,
                kind: Kind::Other(0),
                family: msg[0],
                table: String::new(),
                chain: String::new(),
                handle: None,
                verdict: None,
                ll: Vec::new(),
                nh: Vec::new(),
                th: Vec::new(),
                iif: None,
                oif: None,
                mark: None,
                ct_state: None,
                ct_dir: None,
                ct_status: None,
            };
            for (t, v) in attrs(&msg[4..]) {
                match t {
                    1 => e.table = string(v),
                    2 => e.chain = string(v),
                    3 => {
                        e.handle = v
                            .get(..8)
                            .and_then(|x| x.try_into().ok())
                            .map(u64::from_be_bytes)
                    }
                    4 => {
                        e.kind = match be32(v) {
                            Some(1) => Kind::Policy,
                            Some(2) => Kind::Return,
                            Some(3) => Kind::Rule,
                            Some(k) => Kind::Other(k),
                            None => Kind::Other(0),
                        }
                    }
                    5 => {
                        for (vt, vv) in attrs(v) {
                            if vt == 1 {
                                e.verdict = be32(vv).map(|x| x as i32);
                            }
                        }
                    }
                    6 => e.id = be32(v).unwrap_or(0),
                    7 => e.ll = v.to_vec(),
                    8 => e.nh = v.to_vec(),
                    9 => e.th = v.to_vec(),
                    10 => e.iif = be32(v),
                    12 => e.oif = be32(v),
                    14 => e.mark = be32(v),
                    19 => e.ct_dir = v.first().copied(),
                    20 => e.ct_status = be32(v),
                    21 => e.ct_state = be32(v),
                    _ => {}
                }
            }
            out.push(e);
        }
        let next = (len + 3) & !3;
        dgram = &dgram[next.min(dgram.len())..];
    }
    out
}

/// A subscription to the traces of the current thread's network namespace.
pub struct Traces {
    fd: OwnedFd,
    buf: Vec<u8>,
}

impl Traces {
    /// Subscribe (in the namespace of the calling thread).
    pub fn open() -> io::Result<Traces> {
        Ok(Traces {
            fd: sys::nfnetlink_group_socket(NFNLGRP_NFTRACE)?,
            buf: vec![0; 1 << 16],
        })
    }

    /// The events that came, waiting up to `timeout_ms` for the first. An overrun of the
    /// socket's buffer (ENOBUFS: events lost) is an error.
    pub fn read(&mut self, timeout_ms: i32) -> io::Result<Vec<Event>> {
        let mut out = Vec::new();
        if sys::poll_readable(&[self.fd.as_raw_fd()], timeout_ms)?.is_empty() {
            return Ok(out);
        }
        while let Some(n) = sys::recv_datagram(&self.fd, &mut self.buf)? {
            out.extend(parse(&self.buf[..n]));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(t: u16, v: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend(((4 + v.len()) as u16).to_ne_bytes());
        a.extend(t.to_ne_bytes());
        a.extend(v);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    #[test]
    fn a_rule_event_is_read() {
        let mut body = vec![2, 0, 0, 0]; // nfgenmsg: NFPROTO_IPV4
        body.extend(attr(1, b"t\0"));
        body.extend(attr(2, b"c\0"));
        body.extend(attr(3, &7u64.to_be_bytes()));
        body.extend(attr(4, &3u32.to_be_bytes()));
        body.extend(attr(0x8000 | 5, &attr(1, &1u32.to_be_bytes())));
        body.extend(attr(6, &0xabcdu32.to_be_bytes()));
        body.extend(attr(8, &[0x45, 0, 0, 20]));
        body.extend(attr(10, &2u32.to_be_bytes()));
        body.extend(attr(19, &[1]));
        body.extend(attr(21, &8u32.to_be_bytes()));
        let mut msg = Vec::new();
        msg.extend(((16 + body.len()) as u32).to_ne_bytes());
        msg.extend(MSG_TRACE.to_ne_bytes());
        msg.extend([0u8; 10]);
        msg.extend(&body);
        // a message of another kind after it is skipped
        let mut other = msg.clone();
        other[4..6].copy_from_slice(&((10u16 << 8) | 6).to_ne_bytes());
        msg.extend(other);
        let ev = parse(&msg);
        assert_eq!(ev.len(), 1);
        let e = &ev[0];
        assert_eq!((e.table.as_str(), e.chain.as_str()), ("t", "c"));
        assert_eq!(e.kind, Kind::Rule);
        assert_eq!(e.handle, Some(7));
        assert_eq!(e.verdict_name(), "accept");
        assert_eq!(e.id, 0xabcd);
        assert_eq!(e.nh, vec![0x45, 0, 0, 20]);
        assert_eq!(e.iif, Some(2));
        assert_eq!(e.family, 2);
        assert_eq!(
            (e.ct_state, e.ct_dir, e.ct_status),
            (Some(8), Some(1), None)
        );
        // a truncated datagram gives what it holds whole, and never panics
        for cut in 0..msg.len() {
            let _ = parse(&msg[..cut]);
        }
    }
}
