//! Per-flow scripts, sans-IO: what weir does to chosen packets of chosen connections after
//! the chains, as nfqws2 (zapret2) does for DPI circumvention.
//!
//! - [`payload`]: the payload types and flow protocols, with nfqws2's names, and the
//!   [`payload::Markers`] that position markers resolve against.
//! - [`l7`]: detection of a packet's payload type and the flow's protocol and host name (TLS
//!   ClientHello SNI, HTTP Host, QUIC Initial, DNS, WireGuard, STUN, DTLS), with bounded
//!   reassembly of what spans several packets.
//! - [`desync`]: the actions in Rust (`fake`, `multisplit`, `multidisorder`, ...), on an IP
//!   packet: a verdict and the packets to send.
//! - [`lua`]: sandboxed Lua (5.4, vendored) for anything else.
//! - [`scope`]: what the profiles can act on, so the kernel queues only that.
//!
//! The engine and the daemon reach this crate through a narrow interface; it knows nothing
//! of sockets, queues or rings.

pub mod config;
pub mod counters;
pub mod desync;
pub mod hold;
pub mod l7;
pub mod lua;
pub mod payload;
pub mod profile;
pub mod scope;
pub mod scripts;

pub use scripts::{ScriptStats, Scripts};
