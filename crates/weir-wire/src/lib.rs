//! `weir-wire`: the packet layer of weir.
//!
//! What a layer above may assume: a frame is parsed once into a [`PacketMeta`] (offsets, the
//! 5-tuple, fragment and protocol facts, and the reason if the packet is malformed), and any
//! header [`Field`] can then be read from the frame through it without parsing again. Nothing
//! here allocates per packet.
//!
//! - [`addr`]: typed addresses, [`Addr`] (an IP address with its family) and [`Mac`].
//! - [`field`]: the readable fields, their types and the layer that carries them.
//! - [`meta`]: [`PacketMeta::parse`] and [`PacketMeta::get`], the malformed-packet reasons.
//! - [`checksum`]: RFC 1071 checksums and RFC 1624 incremental updates (for NAT rewrites).
//! - [`pcap`]: reading pcap / pcapng captures and writing pcap.
//! - [`build`]: making test and example packets, well-formed and hostile.
//! - [`frag`]: cutting an IPv4 packet into fragments for a smaller MTU.
//! - [`tunnel`]: a tunnel's inner packet (VXLAN, Geneve, GRE, GRETAP) as `nft_inner` finds it.
//! - [`offload`]: what a device does for offloaded frames, in software: completing partial
//!   TCP/UDP checksums and cutting TCP super-frames (TSO/GSO/GRO) into MTU-sized segments.

pub mod addr;
pub mod build;
pub mod checksum;
pub mod field;
pub mod frag;
pub mod meta;
pub mod offload;
pub mod pcap;
pub mod tunnel;

pub use addr::{Addr, Family, Mac};
pub use field::{DataType, Field, Layer};
pub use meta::{Frag, LinkType, Malformed, PacketMeta, L3};
