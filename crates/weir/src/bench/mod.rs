//! `weir bench`: the benchmarks, one module each. Each measures side by side in one run, and
//! prints text or `--json`; `iptables` and `lab` also draw what they measured as an SVG chart
//! (`--svg FILE`, [`chart`]). [`scripts`]: per-flow scripts in NFQUEUE mode, weir beside
//! nfqws2.

pub mod chart;
pub mod classify;
pub mod iptables;
pub mod lab;
pub mod nft;
pub mod pipeline;
pub mod scripts;
