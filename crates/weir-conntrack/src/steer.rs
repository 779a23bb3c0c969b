//! Which worker owns a connection when several share the traffic of one interface.
//!
//! The inline dataplane runs one worker per core, each with its own connection table. The
//! kernel spreads received frames over the workers (an AF_PACKET fanout group whose classic BPF
//! program computes [`flow_hash`] of the frame, `weir_io::steer`), and both directions of a
//! connection must reach the worker that tracks it. The hash is therefore symmetric (the
//! addresses and the ports enter by XOR), and an ICMP error is steered by the header it
//! quotes, so it reaches the worker of the connection it is related to.
//!
//! NAT makes the reply tuple differ from the inverted original; a worker binding a source NAT
//! picks, among the ports the rule allows, one whose reply tuple hashes to itself
//! ([`worker`]), as VPP's NAT gives each worker its own ports.

use crate::Tuple;
use weir_wire::meta::proto;

/// ICMP types whose second word starts with an identifier that both directions share (echo,
/// timestamp, information, address mask; ICMPv6 echo and node information).
pub fn icmp_has_id(v6: bool, typ: u8) -> bool {
    if v6 {
        matches!(typ, 128 | 129 | 139 | 140)
    } else {
        matches!(typ, 0 | 8 | 13..=18)
    }
}

/// The XOR of an address's 32-bit words (an IPv4 address is one word).
fn fold(a: u128, v6: bool) -> u32 {
    if v6 {
        (a >> 96) as u32 ^ (a >> 64) as u32 ^ (a >> 32) as u32 ^ a as u32
    } else {
        a as u32
    }
}

/// Mix the address word and the port word into the steering hash. The fanout program ends
/// with the same arithmetic (the kernel takes the result modulo the number of workers).
pub fn mix(addrs: u32, ports: u32) -> u32 {
    (addrs ^ ports).wrapping_mul(0x9E37_79B1) >> 16
}

/// The port word of a tuple's hash: the TCP/UDP ports, or the ICMP identifier where both
/// directions carry it; `None` when no port enters the hash (NAT cannot steer by the port).
fn port_word(t: &Tuple) -> Option<u32> {
    match t.proto {
        proto::TCP | proto::UDP => Some((t.sport ^ t.dport) as u32),
        proto::ICMP if !t.v6 && icmp_has_id(false, (t.dport >> 8) as u8) => Some(t.sport as u32),
        proto::ICMPV6 if t.v6 && icmp_has_id(true, (t.dport >> 8) as u8) => Some(t.sport as u32),
        _ => None,
    }
}

/// Whether the port (or ICMP identifier) of `t` enters its hash: only then can a NAT binding
/// choose it to steer the reply.
pub fn port_steers(t: &Tuple) -> bool {
    port_word(t).is_some()
}

/// The steering hash of a connection tuple: the same for both directions, and the same as the
/// fanout program computes for any packet of the connection (ICMP errors included).
pub fn flow_hash(t: &Tuple) -> u32 {
    let a = fold(t.src, t.v6) ^ fold(t.dst, t.v6);
    mix(a, port_word(t).unwrap_or(0))
}

/// The tuple of a packet whose port (or ICMP identifier) enters its hash, read as the fanout
/// program reads a whole packet: TCP/UDP ports, or the identifier of an ICMP message that
/// carries one. For a first fragment, this is how its connection's unfragmented packets
/// steer (the program steers every fragment by its addresses alone). None: the addresses
/// alone steer the packet.
pub fn packet_tuple(pm: &weir_wire::PacketMeta, frame: &[u8]) -> Option<Tuple> {
    let v6 = match pm.l3 {
        weir_wire::L3::Ipv4 => false,
        weir_wire::L3::Ipv6 => true,
        _ => return None,
    };
    let mut t = Tuple {
        zone: 0,
        src: pm.saddr,
        dst: pm.daddr,
        sport: 0,
        dport: 0,
        proto: pm.l4proto,
        v6,
    };
    match pm.l4proto {
        proto::TCP | proto::UDP if pm.has_ports => {
            t.sport = pm.sport;
            t.dport = pm.dport;
        }
        proto::ICMP | proto::ICMPV6 if pm.has_l4 => {
            let l4 = pm.l4_off as usize;
            let typ = *frame.get(l4)?;
            let code = *frame.get(l4 + 1)?;
            t.sport = u16::from_be_bytes(frame.get(l4 + 4..l4 + 6)?.try_into().ok()?);
            t.dport = (typ as u16) << 8 | code as u16;
        }
        _ => return None,
    }
    port_steers(&t).then_some(t)
}

/// The steering hash of a frame, as the fanout program (`weir_io::steer`) computes it: the
/// [`flow_hash`] of its connection, read from the quoted header of an ICMP error; a fragment
/// or a packet without ports by its addresses alone; 0 for what is not IP. For steering in
/// software (AF_XDP: the NIC's queue does not follow the connection).
pub fn frame_hash(pm: &weir_wire::PacketMeta, frame: &[u8]) -> u32 {
    let q;
    let pm = match pm.icmp_quoted(frame) {
        Some(x) if pm.frag == weir_wire::Frag::None => {
            q = x;
            &q
        }
        _ => pm,
    };
    let v6 = match pm.l3 {
        weir_wire::L3::Ipv4 => false,
        weir_wire::L3::Ipv6 => true,
        _ => return 0,
    };
    match packet_tuple(pm, frame).filter(|_| pm.frag == weir_wire::Frag::None) {
        Some(t) => flow_hash(&t),
        None => mix(fold(pm.saddr, v6) ^ fold(pm.daddr, v6), 0),
    }
}

/// The worker (of `workers`) whose table holds the connection of tuple `t`.
pub fn worker(t: &Tuple, workers: u32) -> u32 {
    flow_hash(t) % workers.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(src: u128, dst: u128, sport: u16, dport: u16, proto: u8, v6: bool) -> Tuple {
        Tuple {
            zone: 0,
            src,
            dst,
            sport,
            dport,
            proto,
            v6,
        }
    }

    #[test]
    fn both_directions_hash_alike() {
        let mut x: u64 = 0x1234_5678_9abc_def1;
        let mut spread = [0u32; 4];
        for i in 0..2000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v6 = i % 2 == 1;
            let (s, d) = if v6 {
                ((x as u128) << 64 | i as u128, !(x as u128) << 3)
            } else {
                ((x as u32) as u128, ((x >> 32) as u32) as u128)
            };
            let proto = [6u8, 17, if v6 { 58 } else { 1 }, 47][(i % 4) as usize];
            let dport = if proto == 1 || proto == 58 {
                (if v6 { 128u16 } else { 8 }) << 8
            } else {
                (x >> 48) as u16
            };
            let a = t(s, d, (x >> 16) as u16, dport, proto, v6);
            assert_eq!(flow_hash(&a), flow_hash(&a.invert()), "{a:?}");
            spread[worker(&a, 4) as usize] += 1;
        }
        // every worker gets a share (2000 random tuples: each near 500)
        assert!(spread.iter().all(|&n| n > 350), "{spread:?}");
    }

    #[test]
    fn icmp_id_counts_only_where_both_directions_carry_it() {
        let echo = t(1, 2, 77, 8 << 8, 1, false);
        let other = t(1, 2, 78, 8 << 8, 1, false);
        assert_ne!(flow_hash(&echo), flow_hash(&other));
        // an unreachable (no identifier): the id word is ignored
        let a = t(1, 2, 77, 3 << 8, 1, false);
        let b = t(1, 2, 78, 3 << 8, 1, false);
        assert_eq!(flow_hash(&a), flow_hash(&b));
    }
}
