//! `weir-wire`: the packet layer of weir.
//!
//! What a layer above may assume: a frame is parsed once into a [`PacketMeta`] (offsets, the
//! 5-tuple, fragment and protocol facts, and the reason if the packet is malformed), and any
//! header [`Field`] can then be read from the frame through it without parsing again. Nothing
//! here allocates per packet. Captures are read and written by [`pcap`]; test and example packets
//! are made by [`build`].

pub mod field;
pub mod meta;
pub mod pcap;
pub mod build;

pub use field::{DataType, Field, Layer};
pub use meta::{L3, LinkType, Malformed, PacketMeta};
