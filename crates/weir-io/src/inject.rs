//! Handing a frame to the kernel's own stack as if it had just arrived on its interface:
//! local delivery in inline mode (a packet for the router's own addresses that weir's
//! `input` chains accepted).
//!
//! Weir sends the frame out of the interface from an AF_PACKET socket whose packets carry
//! [`INJECT_MARK`]; a small BPF program on the interface's egress (a `tcx` link, Linux 6.6
//! and later) turns every frame with that mark around (`bpf_redirect` with
//! `BPF_F_INGRESS`), so the kernel receives it on the same interface, with the same
//! addresses: sockets, routing, the kernel's own firewall see what they would have seen
//! without weir. Nothing with that mark leaves the interface. The program is 9 BPF
//! instructions written here and loaded with `bpf(2)`; its link is closed (the program
//! detached) when weir's process ends, however it ends.
//!
//! The frame then enters the interface's receive path again: a native XDP program does not
//! see it (native XDP runs in the driver), weir's AF_PACKET sockets skip it
//! ([`crate::afpacket::Port::ignore_marked`]) and the kernel's `raw` table rule that keeps
//! weir's traffic from the kernel lets it in by its mark (and clears it there). A frame
//! from the wire cannot carry a mark, so none slips past weir this way.

use crate::afpacket;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The mark of the frames weir hands to the kernel.
pub const INJECT_MARK: u32 = 0x7765_707f;

/// The marks of all frames weir hands to the kernel, [`INJECT_MARK`] and the
/// [`tproxy_mark`]s: `mark & INJECT_MASK == INJECT_BASE`.
pub const INJECT_BASE: u32 = 0x7765_7000;
pub const INJECT_MASK: u32 = 0xffff_ff80;

/// The mark of a frame handed to the kernel for the transparent socket of `tproxy` target
/// `i` (`weir_engine::stateful::tproxy`, fewer than
/// `weir_engine::stateful::tproxy::MAX_TARGETS`): a kernel rule of weir's gives it to that
/// socket, a route of weir's delivers it (`weir_dataplane::kernel`).
pub fn tproxy_mark(i: u8) -> u32 {
    INJECT_BASE | u32::from(i & 0x7f)
}

const BPF_PROG_LOAD: i64 = 5;
const BPF_LINK_CREATE: i64 = 28;
const BPF_PROG_TYPE_SCHED_CLS: u32 = 3;
const BPF_TCX_EGRESS: u32 = 47;
const BPF_FUNC_REDIRECT: i32 = 23;
const BPF_F_INGRESS: i32 = 1;
/// `TCX_NEXT`: on to the next program (or the queueing discipline).
const TCX_NEXT: i32 = -1;

fn bpf(cmd: i64, attr: &mut [u8; 128]) -> io::Result<i32> {
    // SAFETY: bpf(2) reads at most the given size of the attribute block, which lives for
    // the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as i32)
}

fn put32(a: &mut [u8; 128], off: usize, v: u32) {
    a[off..off + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(a: &mut [u8; 128], off: usize, v: u64) {
    a[off..off + 8].copy_from_slice(&v.to_ne_bytes());
}

/// One BPF instruction: opcode, destination and source registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0xf);
    b[2..4].copy_from_slice(&off.to_ne_bytes());
    b[4..8].copy_from_slice(&imm.to_ne_bytes());
    b
}

/// The egress program: a frame marked in weir's family ([`INJECT_MASK`]) goes back into
/// the interface's receive path (still marked, so that what reads that path can tell it);
/// any other goes on.
fn program() -> Vec<u8> {
    const LDXW: u8 = 0x61;
    const MOV64X: u8 = 0xbf;
    const MOV64K: u8 = 0xb7;
    const AND32K: u8 = 0x54;
    const JNE32K: u8 = 0x56;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    // struct __sk_buff: mark at 8, ifindex at 40
    [
        insn(MOV64X, 6, 1, 0, 0),                  // 0: r6 = skb
        insn(LDXW, 2, 6, 8, 0),                    // 1: r2 = skb->mark
        insn(AND32K, 2, 0, 0, INJECT_MASK as i32), // 2: r2 &= INJECT_MASK
        insn(JNE32K, 2, 0, 4, INJECT_BASE as i32), // 3: not ours -> 8
        insn(LDXW, 1, 6, 40, 0),                   // 4: r1 = skb->ifindex
        insn(MOV64K, 2, 0, 0, BPF_F_INGRESS),      // 5: r2 = BPF_F_INGRESS
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT),    // 6: bpf_redirect(ifindex, ingress)
        insn(EXIT, 0, 0, 0, 0),                    // 7
        insn(MOV64K, 0, 0, 0, TCX_NEXT),           // 8: r0 = TCX_NEXT
        insn(EXIT, 0, 0, 0, 0),                    // 9
    ]
    .concat()
}

/// The egress program on one interface. Dropping it detaches the program.
pub struct Turnaround {
    _prog: OwnedFd,
    _link: OwnedFd,
}

impl Turnaround {
    /// Load the program and attach it to the egress of interface `name`.
    pub fn attach(name: &str) -> io::Result<Turnaround> {
        let cname = std::ffi::CString::new(name)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
        // SAFETY: if_nametoindex reads the NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
        if ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{name}: no such interface"),
            ));
        }
        let code = program();
        let license = c"Dual MIT/GPL";
        let mut log = vec![0u8; 1 << 14];
        let mut a = [0u8; 128];
        put32(&mut a, 0, BPF_PROG_TYPE_SCHED_CLS);
        put32(&mut a, 4, (code.len() / 8) as u32);
        put64(&mut a, 8, code.as_ptr() as u64);
        put64(&mut a, 16, license.as_ptr() as u64);
        put32(&mut a, 24, 1);
        put32(&mut a, 28, log.len() as u32);
        put64(&mut a, 32, log.as_mut_ptr() as u64);
        a[48..57].copy_from_slice(b"weir_back");
        put32(&mut a, 68, BPF_TCX_EGRESS);
        let prog = bpf(BPF_PROG_LOAD, &mut a).map_err(|e| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            io::Error::new(
                e.kind(),
                format!(
                    "loading the egress program that hands frames to the kernel: {e}{}",
                    if end > 0 {
                        format!("\n{}", String::from_utf8_lossy(&log[..end]))
                    } else {
                        String::new()
                    }
                ),
            )
        })?;
        // SAFETY: a fresh descriptor returned by bpf(2), owned from here on.
        let prog = unsafe { OwnedFd::from_raw_fd(prog) };
        let mut a = [0u8; 128];
        put32(&mut a, 0, prog.as_raw_fd() as u32);
        put32(&mut a, 4, ifindex);
        put32(&mut a, 8, BPF_TCX_EGRESS);
        let link = bpf(BPF_LINK_CREATE, &mut a).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("attaching the egress program to {name} (tcx, Linux 6.6 or later): {e}"),
            )
        })?;
        Ok(Turnaround {
            _prog: prog,
            // SAFETY: a fresh descriptor returned by bpf(2), owned from here on.
            _link: unsafe { OwnedFd::from_raw_fd(link) },
        })
    }
}

/// A worker's way to hand frames to the kernel on one interface: a send-only AF_PACKET
/// socket marking its frames [`INJECT_MARK`] (through the queueing discipline, where the
/// interface's [`Turnaround`] turns them around).
pub struct Injector {
    port: afpacket::Port,
}

impl Injector {
    pub fn open(name: &str) -> io::Result<Injector> {
        Injector::open_marked(name, INJECT_MARK)
    }

    /// An injector whose frames carry `mark`, one of weir's family ([`tproxy_mark`]).
    pub fn open_marked(name: &str, mark: u32) -> io::Result<Injector> {
        let port = afpacket::Port::open_send(name)?;
        port.set_mark(mark)?;
        Ok(Injector { port })
    }

    /// Queue a frame for the kernel (sent with [`Injector::flush`]).
    pub fn push(&mut self, frame: &[u8]) {
        self.port.push(frame);
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.port.flush()
    }

    /// Frames handed over.
    pub fn handed(&self) -> u64 {
        self.port.stats.sent
    }
}
