//! Steering frames to workers: the classic BPF program of an AF_PACKET fanout group.
//!
//! With several inline workers, every worker has its own socket on every interface, and the
//! sockets of one interface form a fanout group (`PACKET_FANOUT_CBPF`). For each frame the
//! kernel runs [`program`] and hands the frame to socket `result % workers`, the sockets being
//! numbered in the order they joined. The program computes
//! `weir_conntrack::steer::flow_hash` of the frame: a symmetric hash of the addresses and the
//! TCP/UDP ports (or the ICMP identifier), taken from the quoted header for ICMP errors, so
//! that both directions of a connection and the errors related to it reach the worker that
//! tracks it. Non-IP frames (ARP) and fragments without ports go by address (ARP: worker 0).
//!
//! Loads are relative to the network header (`SKF_NET_OFF`), wherever the kernel's data
//! pointer is; a load past the end of the frame ends the program with 0 (worker 0).

/// One classic BPF instruction (`struct sock_filter`).
pub type Insn = libc::sock_filter;

// classic BPF opcodes (linux/filter.h, linux/bpf_common.h)
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const IMM: u16 = 0x00;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const ADD: u16 = 0x00;
const MUL: u16 = 0x20;
const AND: u16 = 0x50;
const LSH: u16 = 0x60;
const RSH: u16 = 0x70;
const XOR: u16 = 0xa0;
const K: u16 = 0x00;
const X: u16 = 0x08;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JGT: u16 = 0x20;
const JSET: u16 = 0x40;
const RETA: u16 = 0x10;
const TAX: u16 = 0x00;
const TXA: u16 = 0x80;
/// Loads at `NET + k` read the network header's byte `k`.
const NET: u32 = (-0x10_0000i32) as u32;
/// `ld #proto`: the frame's EtherType.
const AD_PROTOCOL: u32 = (-0x1000i32) as u32;

/// A jump target: a label (resolved by [`Asm::finish`]) or the next instruction.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum L {
    Next,
    At(&'static str),
}

/// A tiny assembler: instructions with symbolic forward jumps.
#[derive(Default)]
struct Asm {
    code: Vec<(u16, L, L, u32)>,
    labels: Vec<(&'static str, usize)>,
}

impl Asm {
    fn op(&mut self, code: u16, k: u32) -> &mut Self {
        self.code.push((code, L::Next, L::Next, k));
        self
    }
    fn jump(&mut self, code: u16, k: u32, t: L, f: L) -> &mut Self {
        self.code.push((code, t, f, k));
        self
    }
    fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.push((name, self.code.len()));
        self
    }
    /// `if A == k goto to`.
    fn jeq(&mut self, k: u32, to: &'static str) -> &mut Self {
        self.jump(JMP | JEQ | K, k, L::At(to), L::Next)
    }
    /// `if A is one of ks goto to`.
    fn jeq_any(&mut self, ks: &[u32], to: &'static str) -> &mut Self {
        for &k in ks {
            self.jeq(k, to);
        }
        self
    }
    fn ja(&mut self, to: &'static str) -> &mut Self {
        self.jump(JMP | JA, 0, L::At(to), L::Next)
    }
    /// A ^= the 32-bit words at `NET + off` .. `NET + off + 4 * n` (scratch M[5]).
    fn xor_words(&mut self, off: u32, n: u32) -> &mut Self {
        self.op(LD | W | ABS, NET + off);
        for i in 1..n {
            self.op(ST, 5)
                .op(LD | W | ABS, NET + off + 4 * i)
                .op(LDX | W | MEM, 5)
                .op(ALU | XOR | X, 0);
        }
        self
    }
    /// An IPv6 header at `off` (no extension headers): M[0] = the XOR of its address words,
    /// X = its payload's offset, to "ports" for TCP/UDP, else A = the next header.
    fn ipv6_header(&mut self, off: u32) -> &mut Self {
        self.xor_words(off + 8, 8)
            .op(ST, 0)
            .op(LDX | W | IMM, off + 40)
            .op(LD | B | ABS, NET + off + 6)
            .jeq_any(&[6, 17], "ports")
    }
    fn finish(&self) -> Vec<Insn> {
        let at = |l: L, i: usize| -> u8 {
            match l {
                L::Next => 0,
                L::At(name) => {
                    let t = self
                        .labels
                        .iter()
                        .find(|(n, _)| *n == name)
                        .unwrap_or_else(|| panic!("steering program: no label {name}"))
                        .1;
                    assert!(t > i && t - i - 1 < 256, "steering program: jump to {name}");
                    (t - i - 1) as u8
                }
            }
        };
        self.code
            .iter()
            .enumerate()
            .map(|(i, &(code, t, f, k))| {
                let ja = code == JMP | JA;
                Insn {
                    code,
                    jt: if ja { 0 } else { at(t, i) },
                    jf: if ja { 0 } else { at(f, i) },
                    k: if ja { at(t, i) as u32 } else { k },
                }
            })
            .collect()
    }
}

/// ICMPv6 types with an identifier both directions carry (`steer::icmp_has_id`).
const ICMP6_ID: [u32; 4] = [128, 129, 139, 140];

/// The fanout program (scratch memory: M[0] the address word, M[1]/M[2] the port word's
/// halves, M[3] the offset of a quoted header, M[5] a temporary).
pub fn program() -> Vec<Insn> {
    let mut a = Asm::default();
    a.op(LD | W | ABS, AD_PROTOCOL)
        .jeq(0x0800, "v4")
        .jeq(0x86dd, "v6")
        .op(RET | K, 0);
    // IPv4: M[0] = saddr ^ daddr; X = header length
    a.label("v4")
        .xor_words(12, 2)
        .op(ST, 0)
        .op(LD | H | ABS, NET + 6)
        .jump(JMP | JSET | K, 0x3fff, L::At("p0"), L::Next)
        .op(LD | B | ABS, NET)
        .op(ALU | AND | K, 0xf)
        .op(ALU | LSH | K, 2)
        .op(MISC | TAX, 0)
        .op(LD | B | ABS, NET + 9)
        .jeq(6, "ports")
        .jeq(17, "ports")
        .jeq(1, "icmp4")
        .ja("p0");
    a.label("icmp4")
        .op(LD | B | IND, NET)
        .jeq_any(&[3, 4, 5, 11, 12], "err4")
        .jeq_any(&[0, 8], "id")
        .jump(JMP | JGT | K, 18, L::At("p0"), L::Next)
        .jump(JMP | JGT | K, 12, L::At("id"), L::At("p0"));
    // an ICMP error: the quoted header at X + 8 decides
    a.label("err4")
        .op(MISC | TXA, 0)
        .op(ALU | ADD | K, 8)
        .op(ST, 3)
        .op(MISC | TAX, 0)
        .op(LD | W | IND, NET + 12)
        .op(ST, 5)
        .op(LD | W | IND, NET + 16)
        .op(LDX | W | MEM, 5)
        .op(ALU | XOR | X, 0)
        .op(ST, 0)
        .op(LDX | W | MEM, 3)
        .op(LD | H | IND, NET + 6)
        .jump(JMP | JSET | K, 0x3fff, L::At("p0"), L::Next)
        .op(LD | B | IND, NET)
        .op(ALU | AND | K, 0xf)
        .op(ALU | LSH | K, 2)
        .op(ALU | ADD | X, 0)
        .op(ST, 5)
        .op(LD | B | IND, NET + 9)
        .op(LDX | W | MEM, 5)
        .jeq(6, "ports")
        .jeq(17, "ports")
        .jeq(1, "qicmp")
        .ja("p0");
    // a quoted ICMP message at X: its identifier when the type has one
    a.label("qicmp")
        .op(LD | B | IND, NET)
        .jeq_any(&[0, 8], "id")
        .jump(JMP | JGT | K, 18, L::At("p0"), L::Next)
        .jump(JMP | JGT | K, 12, L::At("id"), L::At("p0"));
    // IPv6 (no extension headers): M[0] = the XOR of the address words
    a.label("v6").ipv6_header(0).jeq(58, "icmp6").ja("p0");
    a.label("icmp6")
        .op(LD | B | ABS, NET + 40)
        .jeq_any(&ICMP6_ID, "id")
        .jeq(0, "p0")
        .jump(JMP | JGT | K, 4, L::At("p0"), L::Next)
        // an ICMPv6 error: the quoted IPv6 header at 48
        .ipv6_header(48)
        .jump(JMP | JEQ | K, 58, L::Next, L::At("p0"))
        .op(LD | B | ABS, NET + 88)
        .jeq_any(&ICMP6_ID, "id")
        .ja("p0");
    // the port word at X: sport ^ dport
    a.label("ports")
        .op(LD | W | IND, NET)
        .op(ST, 1)
        .op(ALU | AND | K, 0xffff)
        .op(ST, 2)
        .op(LD | MEM, 1)
        .op(ALU | RSH | K, 16)
        .op(LDX | W | MEM, 2)
        .op(ALU | XOR | X, 0)
        .ja("mix");
    // the identifier at X + 4
    a.label("id").op(LD | H | IND, NET + 4).ja("mix");
    a.label("p0").op(LD | IMM, 0);
    // weir_conntrack::steer::mix
    a.label("mix")
        .op(LDX | W | MEM, 0)
        .op(ALU | XOR | X, 0)
        .op(ALU | MUL | K, 0x9E37_79B1)
        .op(ALU | RSH | K, 16)
        .op(RET | RETA, 0);
    a.finish()
}

/// Run a classic BPF program as the kernel does for a fanout group, over a frame whose
/// network header is `net` and whose EtherType is `ethertype`: the subset of opcodes the
/// steering program uses (tests check the program against the Rust hash with it).
pub fn interpret(prog: &[Insn], net: &[u8], ethertype: u16) -> u32 {
    let (mut a, mut x) = (0u32, 0u32);
    let mut m = [0u32; 16];
    let mut pc = 0usize;
    let load = |off: u32, size: u16| -> Option<u32> {
        if off == AD_PROTOCOL {
            return Some(ethertype as u32);
        }
        let o = off.wrapping_sub(NET) as usize;
        let n = match size {
            W => 4,
            H => 2,
            _ => 1,
        };
        let b = net.get(o..o.checked_add(n)?)?;
        Some(b.iter().fold(0u32, |v, &c| v << 8 | c as u32))
    };
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let (class, k) = (i.code & 7, i.k);
        match class {
            LD | LDX => {
                let mode = i.code & 0xe0;
                let v = match mode {
                    IMM => k,
                    MEM => m[k as usize & 15],
                    ABS => match load(k, i.code & 0x18) {
                        Some(v) => v,
                        None => return 0,
                    },
                    IND => match load(k.wrapping_add(x), i.code & 0x18) {
                        Some(v) => v,
                        None => return 0,
                    },
                    _ => panic!("opcode {:#x}", i.code),
                };
                if class == LD {
                    a = v
                } else {
                    x = v
                }
            }
            ST => m[k as usize & 15] = a,
            ALU => {
                let v = if i.code & X != 0 { x } else { k };
                a = match i.code & 0xf0 {
                    ADD => a.wrapping_add(v),
                    MUL => a.wrapping_mul(v),
                    AND => a & v,
                    LSH => a.wrapping_shl(v),
                    RSH => a.wrapping_shr(v),
                    XOR => a ^ v,
                    _ => panic!("opcode {:#x}", i.code),
                };
            }
            JMP => {
                let take = match i.code & 0xf0 {
                    JA => {
                        pc += k as usize;
                        continue;
                    }
                    JEQ => a == k,
                    JGT => a > k,
                    JSET => a & k != 0,
                    _ => panic!("opcode {:#x}", i.code),
                };
                pc += if take { i.jt } else { i.jf } as usize;
            }
            RET => return if i.code & RETA != 0 { a } else { k },
            MISC => {
                if i.code & 0xf8 == TXA {
                    a = x
                } else {
                    x = a
                }
            }
            _ => panic!("opcode {:#x}", i.code),
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use weir_conntrack::steer::{flow_hash, frame_hash};
    use weir_conntrack::Tuple;
    use weir_wire::build::{Builder, Tcp};
    use weir_wire::{LinkType, PacketMeta};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn addr(r: &mut Rng, v6: bool) -> IpAddr {
        if v6 {
            IpAddr::V6(Ipv6Addr::from((r.next() as u128) << 64 | r.next() as u128))
        } else {
            IpAddr::V4(Ipv4Addr::from(r.next() as u32))
        }
    }

    fn value(a: IpAddr) -> u128 {
        match a {
            IpAddr::V4(a) => u32::from(a) as u128,
            IpAddr::V6(a) => u128::from(a),
        }
    }

    /// A random packet (no link header), its ethertype and the tuple of its connection.
    fn packet(r: &mut Rng, b: &Builder) -> (Vec<u8>, u16, Tuple) {
        let v6 = r.next().is_multiple_of(2);
        let (s, d) = (addr(r, v6), addr(r, v6));
        let (sp, dp) = (r.next() as u16, r.next() as u16);
        let icmp = if v6 { 58 } else { 1 };
        let (p, proto, sport, dport) = match r.next() % 4 {
            0 => {
                let t = Tcp::new(sp, dp, 0x02);
                (b.tcp(s, d, &t, b"x"), 6, sp, dp)
            }
            1 => (b.udp(s, d, sp, dp, b"xy"), 17, sp, dp),
            2 => {
                let req = r.next().is_multiple_of(2);
                let typ = match (v6, req) {
                    (false, true) => 8u16,
                    (false, false) => 0,
                    (true, true) => 128,
                    (true, false) => 129,
                };
                (b.icmp_echo(s, d, req, sp, dp, b"p"), icmp, sp, typ << 8)
            }
            _ => {
                // no identifier and not an error (a router advertisement): by address
                let typ = if v6 { 134 } else { 9 };
                (b.icmp(s, d, typ, 0, 0, b"abcd"), icmp, 0, (typ as u16) << 8)
            }
        };
        let t = Tuple {
            zone: 0,
            src: value(s),
            dst: value(d),
            sport,
            dport,
            proto,
            v6,
        };
        (p, if v6 { 0x86dd } else { 0x0800 }, t)
    }

    #[test]
    fn program_computes_the_flow_hash() {
        let prog = program();
        let b = Builder::raw();
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for _ in 0..4000 {
            let (p, et, t) = packet(&mut r, &b);
            assert_eq!(interpret(&prog, &p, et), flow_hash(&t), "{t:?}");
            // the same in software (AF_XDP workers steer frames themselves)
            let soft = |f: &[u8]| frame_hash(&PacketMeta::parse(f, LinkType::RawIp), f);
            assert_eq!(soft(&p), flow_hash(&t), "{t:?}");
            // an ICMP error quoting the packet (from a third address) goes with its connection
            let v6 = et == 0x86dd;
            let (typ, code) = if v6 { (1, 4) } else { (3, 3) };
            let (hop, to) = (addr(&mut r, v6), addr(&mut r, v6));
            let err = b.icmp_error(hop, to, typ, code, &p, 48 + 8);
            assert_eq!(
                interpret(&prog, &err, et),
                flow_hash(&t),
                "error quoting {t:?}"
            );
            assert_eq!(soft(&err), flow_hash(&t), "error quoting {t:?}");
            // a truncated frame never reads past its end (ends as worker 0 or a hash)
            let cut = (r.next() as usize) % p.len();
            interpret(&prog, &p[..cut], et);
        }
    }

    #[test]
    fn non_ip_and_fragments() {
        let prog = program();
        assert_eq!(interpret(&prog, &[0u8; 28], 0x0806), 0);
        let b = Builder::raw();
        let s = Ipv4Addr::new(198, 18, 0, 1);
        let d = Ipv4Addr::new(198, 18, 1, 1);
        let mut f = b.udp(s, d, 1000, 2000, b"x");
        f[6] = 0x20; // more fragments: by address only
        let t = Tuple {
            src: u32::from(s) as u128,
            dst: u32::from(d) as u128,
            proto: 47,
            ..Tuple::default()
        };
        assert_eq!(interpret(&prog, &f, 0x0800), flow_hash(&t));
        let pm = PacketMeta::parse(&f, LinkType::RawIp);
        assert_eq!(frame_hash(&pm, &f), flow_hash(&t));
    }

    #[test]
    fn the_program_is_what_the_kernel_accepts() {
        let prog = program();
        assert!(prog.len() < 4096);
        eprintln!("steering program: {} instructions", prog.len());
        assert_eq!(prog.last().map(|i| i.code & 7), Some(RET));
        for (i, insn) in prog.iter().enumerate() {
            if insn.code & 7 == JMP {
                let far = if insn.code == JMP | JA {
                    insn.k as usize
                } else {
                    insn.jt.max(insn.jf) as usize
                };
                assert!(i + 1 + far < prog.len());
            }
            if insn.code & 7 == ST || (insn.code & 7 <= LDX && insn.code & 0xe0 == MEM) {
                assert!(insn.k < 16);
            }
        }
    }
}
