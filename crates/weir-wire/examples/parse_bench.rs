//! Rough cost of `PacketMeta::parse` and `get` per packet kind (run with `--release`).
//!
//! `cargo run --release -p weir-wire --example parse_bench`

use std::hint::black_box;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Instant;

use weir_wire::build::{tcp_flags as tf, Builder, Tcp};
use weir_wire::{Field, LinkType, PacketMeta};

fn main() {
    let a4 = Ipv4Addr::new(198, 18, 0, 1);
    let b4 = Ipv4Addr::new(198, 18, 0, 2);
    let a6: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let b6: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let t = Tcp::new(40000, 443, tf::ACK);
    let kinds: Vec<(&str, Vec<u8>)> = vec![
        ("v4 tcp", Builder::new().tcp(a4, b4, &t, &[0; 64])),
        (
            "v4 udp vlan",
            Builder::new().vlan(10).udp(a4, b4, 1, 53, &[0; 64]),
        ),
        ("v6 tcp", Builder::new().tcp(a6, b6, &t, &[0; 64])),
        (
            "v6 tcp 3 ext",
            Builder::new()
                .hop_by_hop()
                .routing()
                .dest_opts()
                .tcp(a6, b6, &t, &[0; 64]),
        ),
    ];
    const N: u32 = 5_000_000;
    for (name, f) in &kinds {
        let start = Instant::now();
        let mut acc = 0u64;
        for _ in 0..N {
            let m = PacketMeta::parse(black_box(f), LinkType::Ethernet);
            acc = acc.wrapping_add(m.dport as u64);
        }
        let parse_ns = start.elapsed().as_nanos() as f64 / N as f64;
        let m = PacketMeta::parse(f, LinkType::Ethernet);
        let start = Instant::now();
        for _ in 0..N {
            let v = black_box(&m).get(black_box(f), black_box(Field::TcpFlags));
            acc = acc.wrapping_add(v.unwrap_or(0) as u64);
        }
        let get_ns = start.elapsed().as_nanos() as f64 / N as f64;
        println!("{name:14} parse {parse_ns:6.1} ns   get {get_ns:5.1} ns   ({acc})");
    }
}
