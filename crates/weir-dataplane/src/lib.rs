//! `weir-dataplane`: the live dataplane, `weir run`, as a library.
//!
//! - [`config`]: the configuration file, typed ([`config::Config`]), and the inline router it
//!   describes.
//! - [`kernel`]: the iptables rules weir installs and removes, and the sysctls it checks.
//! - [`kernel_fib`]: NFQUEUE mode: the kernel's routes and addresses (rtnetlink), kept
//!   current, answer the rules' `fib` lookups.
//! - [`scope`]: NFQUEUE mode with a ruleset that only hands packets to per-flow scripts:
//!   the kernel queues only what the scripts' profiles can act on (`connbytes`).
//! - [`netdev`]: NFQUEUE mode: the ruleset's netdev tables installed in the kernel's nftables
//!   (weir never sees a packet at a device's hooks there), their counters read back.
//! - [`workers`]: one thread per queue or inline worker, each with its own engine; NFQUEUE
//!   ([`workers::nfqueue`]), inline ([`workers::inline`]: `weir_router::Router` between
//!   [`workers::links`]), fragments and frames handed between workers
//!   ([`workers::handoff`]).
//! - [`control`]: `weir ctl`'s typed requests and replies, the control socket, the
//!   Prometheus metrics ([`control::metrics`]).
//! - [`stats`]: what is counted, as typed structs added together and rendered at the edge.
//! - [`dispatcher`]: between the control plane and the workers (reloads, requests).
//! - [`daemon`]: [`run`], start to stop; [`notify`] (systemd readiness), [`log`]
//!   (`tracing`), [`trace`] (`weir ctl trace`).
//!
//! The packet path itself is not here: it is `weir_engine` (the chains) and `weir_router`
//! (the router's path), sans-IO; this crate is their I/O and control.

pub mod config;
pub mod control;
pub mod daemon;
pub mod dispatcher;
pub mod kernel;
pub mod kernel_fib;
pub mod log;
pub mod monitor;
pub mod netdev;
pub mod notify;
pub mod scope;
pub mod sockets;
pub mod stats;
pub mod trace;
pub mod workers;

pub use daemon::{run, RunOptions};
