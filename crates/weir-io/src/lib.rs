//! Packet I/O backends: the thin adapters that move packets between the kernel and weir's
//! sans-IO engine. Each backend receives a batch of packets with their metadata, lets the
//! caller decide, and hands the decisions back in one system call where the kernel allows it.
//!
//! - [`nfqueue`]: the kernel forwards and queues packets to weir over netfilter's
//!   `nfnetlink_queue`; weir returns verdicts (and rewritten packets), many per `sendmsg`.
//! - [`afpacket`]: weir reads and writes Ethernet frames on interfaces itself (inline mode),
//!   batched with `recvmmsg` / `sendmmsg`.
//! - [`raw`]: raw IP sockets for the answers weir sends itself in NFQUEUE mode (resets and
//!   ICMP errors for rejected packets).
//! - [`rtnl`]: the kernel's devices, addresses and routes read by rtnetlink, and their changes
//!   (what `fib` looks up in NFQUEUE mode).
//! - [`sockdiag`]: the kernel's socket lookup over `NETLINK_SOCK_DIAG`, as nft's `tproxy` and
//!   `socket` expressions make it: which local socket would take a packet (inline mode).
//! - [`xdp`]: the same over AF_XDP: an XDP program hands weir the IP frames before the kernel
//!   builds socket buffers for them; frames move through rings shared with the kernel.

pub mod afpacket;
pub mod inject;
mod mmsg;
pub mod nfqueue;
pub mod raw;
pub mod rtnl;
pub mod sockdiag;
pub mod steer;
pub mod xdp;
