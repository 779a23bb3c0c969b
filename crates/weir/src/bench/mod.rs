//! `weir bench`: the benchmarks, one module each. Each measures side by side in one run, and
//! prints text or `--json`.

pub mod classify;
pub mod iptables;
pub mod lab;
pub mod pipeline;
