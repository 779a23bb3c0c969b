//! TFTP (`nf_conntrack_tftp` / `nf_nat_tftp`): a read or write request (opcode 1 or 2) from
//! the client makes the server's answer, from a port of its choosing to the client's port,
//! an expected connection. Nothing in the payload names an address, so nothing is rewritten.

use super::{Cx, Expect, Out};
use weir_conntrack::Dir;

/// Read one TFTP datagram.
pub fn help(cx: &Cx, payload: &[u8], out: &mut Out) {
    if cx.dir != Dir::Original || payload.len() < 2 {
        return;
    }
    let opcode = u16::from_be_bytes([payload[0], payload[1]]);
    if opcode == 1 || opcode == 2 {
        out.expects.push(Expect {
            proto: 17,
            dst: (cx.other.dst, cx.other.dport),
            to: (cx.this.src, cx.this.sport),
            sport: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_conntrack::Tuple;

    fn t(src: u32, sport: u16, dst: u32, dport: u16) -> Tuple {
        Tuple {
            zone: 0,
            src: src as u128,
            dst: dst as u128,
            sport,
            dport,
            proto: 17,
            v6: false,
        }
    }

    #[test]
    fn read_request_expects_the_servers_answer_to_the_translated_port() {
        // client 10.0.0.2:3000 masqueraded to 192.0.2.1:4000, server 192.0.2.9:69
        let cx = Cx {
            dir: Dir::Original,
            this: t(0x0a000002, 3000, 0xc0000209, 69),
            other: t(0xc0000209, 69, 0xc0000201, 4000),
        };
        let mut out = Out::default();
        help(&cx, b"\x00\x01file\x00octet\x00", &mut out);
        assert_eq!(
            out.expects,
            vec![Expect {
                proto: 17,
                dst: (0xc0000201, 4000),
                to: (0x0a000002, 3000),
                sport: None
            }]
        );
        assert!(out.edits.is_empty());
        // data (3), an answer, a short datagram: nothing
        for p in [&b"\x00\x03\x00\x01xx"[..], b"\x00"] {
            let mut o = Out::default();
            help(&cx, p, &mut o);
            assert!(o.expects.is_empty());
        }
        let mut o = Out::default();
        help(
            &Cx {
                dir: Dir::Reply,
                ..cx
            },
            b"\x00\x01f\x00octet\x00",
            &mut o,
        );
        assert!(o.expects.is_empty());
    }
}
