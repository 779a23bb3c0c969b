//! What the end-to-end tests of `Scripts` share: a client's TCP connection to port 443 of
//! a server, its packets forwarded through the engine's hooks (prerouting, forward,
//! postrouting) with a ruleset that queues the client's side to queue 200.
#![allow(dead_code)]

use std::net::Ipv4Addr;
use weir_engine::stateful::{PacketCt, Stateful};
use weir_engine::{Decision, Meta};
use weir_lang::ir::Hook;
use weir_wire::build::{Builder, Tcp};
use weir_wire::{LinkType, PacketMeta};

pub const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
pub const SERVER: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// The client's first data byte's sequence (its SYN's is one less); the server's ISN is 7.
pub const ISN: u32 = 0x1000_0000;

pub const RULES: &str = "table inet z {
  chain post {
    type filter hook postrouting priority 101;
    tcp dport 443 queue num 200
  }
}
";

/// A forwarded frame through the hooks at `now_ns`: the decision, the frame as it left,
/// and what the scripts sent.
pub fn forward_at(
    sf: &mut Stateful,
    mut frame: Vec<u8>,
    now_ns: u64,
) -> (Decision, Vec<u8>, Vec<Vec<u8>>) {
    let mut pm = PacketMeta::parse(&frame, LinkType::Ethernet);
    let mut pc = PacketCt::default();
    let mut meta = Meta::with_ifnames("lan0", "wan0");
    for hook in [Hook::Prerouting, Hook::Forward, Hook::Postrouting] {
        let d = sf.hook_mut(hook, &mut frame, &mut pm, &mut meta, now_ns, &mut pc);
        if !d.is_accept() {
            return (d, frame, sf.take_queue_out());
        }
    }
    let d = sf.finish(&mut pc, now_ns);
    (d, frame, sf.take_queue_out())
}

pub fn forward(sf: &mut Stateful, frame: Vec<u8>) -> (Decision, Vec<u8>, Vec<Vec<u8>>) {
    forward_at(sf, frame, 1_000)
}

/// A TCP segment of the connection, with the acknowledgement the handshake makes right.
pub fn tcp(flags: u8, seq: u32, payload: &[u8], from_client: bool) -> Vec<u8> {
    let mut t = Tcp::new(40000, 443, flags);
    t.seq = seq;
    t.ack = match (flags & 0x10 != 0, from_client) {
        (false, _) => 0,
        (true, true) => 8,
        (true, false) => ISN,
    };
    let (a, b) = if from_client {
        (CLIENT, SERVER)
    } else {
        (SERVER, CLIENT)
    };
    if !from_client {
        t.sport = 443;
        t.dport = 40000;
    }
    Builder::new().tcp(a, b, &t, payload)
}

/// SYN, SYN+ACK (not queued: the rule takes dport 443), ACK at `now_ns`: each accepted;
/// what the scripts sent for each.
pub fn handshake_at(sf: &mut Stateful, now_ns: u64) -> Vec<Vec<Vec<u8>>> {
    let mut all = Vec::new();
    for (flags, seq, client) in [(0x02, ISN - 1, true), (0x12, 7, false), (0x10, ISN, true)] {
        let (d, _, sent) = forward_at(sf, tcp(flags, seq, b"", client), now_ns);
        assert_eq!(d, Decision::Accept, "flags {flags:#x}");
        all.push(sent);
    }
    all
}

/// An engine for `rules` with a default connection table and nobody on its queues yet.
pub fn engine(rules: &str) -> Stateful {
    let rs = weir_lang::load_str("t.nft", rules)
        .unwrap_or_else(|(sm, d)| panic!("{}", weir_lang::diag::render_all(&d, &sm)))
        .0;
    Stateful::new(
        weir_engine::Engine::new(weir_engine::Compiled::build(
            &rs,
            weir_engine::Mode::Compiled,
        )),
        weir_conntrack::Config::default(),
    )
}

/// (seq, ttl, payload) of an IPv4/TCP packet, and whether its TCP checksum verifies.
pub fn seg(ip: &[u8]) -> (u32, u8, Vec<u8>, bool) {
    let ihl = (ip[0] & 0x0f) as usize * 4;
    let doff = (ip[ihl + 12] >> 4) as usize * 4;
    let seq = u32::from_be_bytes(ip[ihl + 4..ihl + 8].try_into().unwrap());
    let pm = PacketMeta::parse(ip, LinkType::RawIp);
    let ok = matches!(
        weir_wire::offload::classify_checksum(ip, &pm),
        Ok(weir_wire::offload::CsumState::Valid)
    );
    (seq, ip[8], ip[ihl + doff..].to_vec(), ok)
}
