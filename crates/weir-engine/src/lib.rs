//! `weir-engine`: the sans-IO engine.
//!
//! A [`compile::Compiled`] ruleset (built from [`weir_lang::ir`]) and a per-worker
//! [`eval::State`] make an [`eval::Engine`]; [`eval::Engine::process`] takes one parsed packet,
//! its metadata and the time, and returns the decision for a hook. No I/O, no clock reads, no
//! allocation per packet: the same engine runs under `weir replay` (pcap files), the benchmarks
//! and, later, the live backends.

pub mod answer;
pub mod compile;
mod ct;
mod dynset;
pub mod eval;
pub mod fib;
pub mod frag;
pub mod hash;
pub mod helper;
mod host;
mod limit;
mod meta;
pub mod nat;
pub mod objects;
pub mod osf;
mod random;
mod raw_write;
pub mod sets;
pub mod socket;
pub mod stateful;
pub mod synproxy;
mod tcp_strip;

pub use compile::{Compiled, Mode};
pub use eval::{CtView, Decision, DropReason, Engine, Fwd, FwdNeigh, Meta, NatAction, Pkt};
pub use fib::{Fib, FibQuery, FibRoute};
