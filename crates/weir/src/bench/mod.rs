//! `weir bench`: the benchmarks, one module each. Each measures side by side in one run, and
//! prints text or `--json`; `iptables` and `lab` also draw what they measured as an SVG chart
//! (`--svg FILE`, [`chart`]).

pub mod chart;
pub mod classify;
pub mod iptables;
pub mod lab;
pub mod pipeline;
