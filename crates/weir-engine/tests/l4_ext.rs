//! TCP options and SCTP chunks in rules (`tcp option maxseg size 1460`, `tcp option
//! sack-perm exists`, `sctp chunk init exists`, `sctp chunk data tsn 5`), read as the
//! kernel's nft_exthdr reads them, the same in the compiled and the linear evaluator.

use std::net::Ipv4Addr;
use weir_engine::Mode;
use weir_wire::build::Builder;

mod common;
use common::*;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);

/// An IPv4 packet of protocol `p` with this transport header and payload.
fn packet(p: u8, l4: &[u8]) -> Vec<u8> {
    Builder::raw().ip(A, B, p, l4)
}

/// A TCP header (ports 1000 -> 443, SYN) with these option bytes (padded to 4).
fn tcp(opts: &[u8]) -> Vec<u8> {
    let mut o = opts.to_vec();
    while !o.len().is_multiple_of(4) {
        o.push(0);
    }
    let doff = (20 + o.len()) / 4;
    let mut h = vec![
        0x03,
        0xe8,
        0x01,
        0xbb,
        0,
        0,
        0,
        1,
        0,
        0,
        0,
        0,
        (doff as u8) << 4,
        0x02,
        0xff,
        0xff,
        0,
        0,
        0,
        0,
    ];
    h.extend(o);
    h
}

/// An SCTP packet with these chunks (type, flags, body; each padded to 4).
fn sctp(chunks: &[(u8, &[u8])]) -> Vec<u8> {
    let mut h = vec![0x0b, 0xb8, 0x0b, 0xb9, 0, 0, 0, 1, 0, 0, 0, 0];
    for (t, body) in chunks {
        let len = 4 + body.len();
        h.extend([*t, 0]);
        h.extend((len as u16).to_be_bytes());
        h.extend(*body);
        while !h.len().is_multiple_of(4) {
            h.push(0);
        }
    }
    h
}

const RULES: &str = "table ip t {
  chain c {
    type filter hook input priority 0;
    tcp option maxseg size 1460 meta mark set meta mark | 0x1
    tcp option sack-perm exists meta mark set meta mark | 0x2
    tcp option sack-perm missing meta mark set meta mark | 0x4
    tcp option timestamp tsecr 7 meta mark set meta mark | 0x8
    tcp option window count 7 meta mark set meta mark | 0x10
    sctp chunk init exists meta mark set meta mark | 0x100
    sctp chunk data tsn 5 meta mark set meta mark | 0x200
    sctp chunk data stream 9 meta mark set meta mark | 0x400
    sctp chunk init missing meta mark set meta mark | 0x800
  }
}
";

#[test]
fn tcp_options_and_sctp_chunks_in_rules() {
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(RULES, mode);
        // MSS, SACK permitted, NOPs, timestamps, window scale: each found
        let opts = [
            2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 7, 1, 3, 3, 7,
        ];
        assert_eq!(
            mark(&mut sf, packet(6, &tcp(&opts))),
            0x1 | 0x2 | 0x8 | 0x10 | 0x800
        );
        // none: missing matches (and on a packet of another protocol, as the kernel finds
        // no option there)
        assert_eq!(mark(&mut sf, packet(6, &tcp(&[]))), 0x4 | 0x800);
        assert_eq!(
            mark(&mut sf, packet(17, &[0, 1, 0, 2, 0, 8, 0, 0])),
            0x4 | 0x800
        );
        // an end-of-list does not stop the walk; a zero length counts one byte
        let opts = [0, 2, 0, 4, 2, 0, 4, 2];
        assert_eq!(mark(&mut sf, packet(6, &tcp(&opts))), 0x2 | 0x800);
        // a field past the header's end is not read
        let opts = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 4];
        assert_eq!(mark(&mut sf, packet(6, &tcp(&opts))), 0x4 | 0x800);
        // an option that runs past the header is not found, `exists` included; a field past
        // the option's length is not read (nft_exthdr_tcp_eval: `i + optl > tcphdr_len ||
        // priv->len + priv->offset > optl`)
        let opts = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 5, 0x05, 0xb4];
        assert_eq!(mark(&mut sf, packet(6, &tcp(&opts))), 0x4 | 0x800);
        let opts = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 3];
        assert_eq!(mark(&mut sf, packet(6, &tcp(&opts))), 0x4 | 0x800);
        let opts = [4, 3, 1, 1, 2, 3, 0x05, 0xb4];
        assert_eq!(mark(&mut sf, packet(6, &tcp(&opts))), 0x2 | 0x800);
        // SCTP: an INIT chunk, then DATA (tsn 5, stream 9)
        let init: &[u8] = &[0; 16];
        let data: &[u8] = &[0, 0, 0, 5, 0, 9, 0, 0, 0, 0, 0, 0, 0xaa];
        assert_eq!(
            mark(&mut sf, packet(132, &sctp(&[(1, init), (0, data)]))),
            0x4 | 0x100 | 0x200 | 0x400
        );
        assert_eq!(
            mark(&mut sf, packet(132, &sctp(&[(0, data)]))),
            0x4 | 0x200 | 0x400 | 0x800
        );
        // a chunk of length 0 ends the walk
        let mut p = sctp(&[(3, &[]), (1, init)]);
        p[14..16].copy_from_slice(&[0, 0]);
        assert_eq!(mark(&mut sf, packet(132, &p)), 0x4 | 0x800);
    }
}

/// Raw payload (`@th,16,16`, `@nh,72,8`, `@ih,0,8`, `@ll,96,16`, bits off a byte), as
/// nft_payload loads it.
#[test]
fn raw_payload_in_rules() {
    let rules = "table ip t {
  chain c {
    type filter hook input priority 0;
    @th,16,16 443 meta mark set meta mark | 0x1
    @nh,72,8 6 meta mark set meta mark | 0x2
    @ih,0,8 0x47 meta mark set meta mark | 0x4
    @th,110,1 1 meta mark set meta mark | 0x8
    @th,96,4 5 meta mark set meta mark | 0x10
    @ih,0,64 0x474554202f204854 meta mark set meta mark | 0x20
  }
}
";
    for mode in [Mode::Compiled, Mode::Linear] {
        let mut sf = engine(rules, mode);
        // a SYN to 443 with "GET / HTT" as its payload: dport, protocol, the payload's first
        // byte, the SYN bit (bit 6 of byte 13: 110), the data offset (5)
        let mut l4 = tcp(&[]);
        l4.extend_from_slice(b"GET / HTT");
        assert_eq!(
            mark(&mut sf, packet(6, &l4)),
            0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20
        );
        // UDP: the payload starts after 8 bytes; nothing of TCP's
        let udp = [
            0, 1, 1, 0xbb, 0, 17, 0, 0, b'G', b'E', b'T', b' ', b'/', b' ', b'H', b'T', b'T',
        ];
        assert_eq!(mark(&mut sf, packet(17, &udp)), 0x1 | 0x4 | 0x20);
        // a field past the packet's end is not read
        assert_eq!(mark(&mut sf, packet(17, &[0, 1, 1, 0xbb, 0, 8, 0, 0])), 0x1);
    }
}
