//! The desync actions of nfqws2's `zapret-antidpi.lua`, in Rust, on one IP packet (IPv4 or
//! IPv6, starting at the IP header, TCP or UDP): `fake`, `rst`, `multisplit`,
//! `multidisorder`, `fakedsplit`, `fakeddisorder`, `hostfakesplit`, `tcpseg`, `syndata`,
//! `wsize`, `udplen`, `ipfrag`, and the small `send`, `pktmod`, `drop`.
//!
//! An [`Action`] is parsed once, at configuration ([`Action::parse`], nfqws2's names and
//! arguments), then [`apply`] runs it on a packet: it never panics, and a packet it cannot
//! act on (not IP, a fragment, no payload, not TCP for a TCP action, markers that do not
//! resolve, a blob missing) gets [`Verdict::Pass`] with nothing to send.
//!
//! # Ordering contract
//!
//! [`Output::send`] lists packets to send, in order, before anything else. Then:
//! - [`Verdict::Pass`]: the original packet goes, unchanged, after them (`fake`, `rst`,
//!   `tcpseg`, `send`, `nodrop`);
//! - [`Verdict::Modify`]: [`Output::modified`] goes instead of the original, after them;
//! - [`Verdict::Drop`]: the original does not go (the splits sent it in pieces).
//!
//! # Packets made
//!
//! Every packet sent has correct IPv4 total length / IPv6 payload length, IPv4 header
//! checksum and TCP/UDP checksum (but for `badsum`); TCP segments carry the original's
//! sequence number plus the offset of their data (minus `seqovl`). IPv4 ids follow `ip_id`
//! ([`IpId`]; by default the packets sent take the original's id + 1, + 2, ...). TCP
//! payloads longer than `max(1220 - extra header bytes, original payload length)` are cut
//! further, as nfqws2 cuts by MSS (1220 when it does not know it). `repeats=N` sends each
//! packet N times in a row where nfqws2 does (fakes; all parts of `multisplit`,
//! `multidisorder`, `tcpseg`, which nfqws2 sends with full options). Relative markers
//! resolve against [`Input::markers`] whatever the payload type; with `blob=` replacing
//! the payload, only absolute markers resolve.
//!
//! `oob` reads where the packet lies in its connection ([`FlowPos`], [`apply_at`]) and
//! asks for its cutoff ([`Output::cutoff`]) once past the first data.
//!
//! Not done: `tls_mod`, custom `fool`
//! and `ipfrag` functions, `synack`, `synack_split`, `wssize`, the HTTP tamperings.

mod args;
pub mod blobs;
mod fake;
pub mod fooling;
pub mod markers;
mod misc;
mod oob;
mod split;
mod tcp;

use std::fmt;

pub use blobs::{BlobRef, Blobs};
pub use fooling::{AutoTtl, Fooling, IpId};
pub use markers::Marker;

use crate::payload::{Markers, PayloadType};
use args::Args;
use tcp::{Dissect, Seg};

/// nfqws2's MSS when it does not know the connection's.
pub const DEFAULT_MSS: usize = 1220;

/// One packet to act on.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    /// The IP packet (no link header).
    pub packet: &'a [u8],
    pub ptype: PayloadType,
    /// Where the host name etc. lie in the L4 payload.
    pub markers: Markers,
    /// TTL / hop limit last seen from the server, for autottl.
    pub incoming_ttl: Option<u8>,
}

/// Where a packet lies in its connection, for the actions that need it (`oob`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowPos {
    /// From the client.
    pub outgoing: bool,
    /// The packet's sequence number relative to its direction's first (nfqws2's `s`
    /// position: 0 the SYN, 1 the first data byte).
    pub own_seq: u64,
    /// The other direction's last such position.
    pub reverse_seq: u64,
    /// The connection was seen from the client's SYN.
    pub from_syn: bool,
}

impl Default for FlowPos {
    /// An outgoing packet of a connection seen from its start, at position 1.
    fn default() -> FlowPos {
        FlowPos {
            outgoing: true,
            own_seq: 1,
            reverse_seq: 0,
            from_syn: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Modify,
    Drop,
}

/// What to do: see the module's ordering contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub verdict: Verdict,
    /// With [`Verdict::Modify`]: the packet that replaces the original.
    pub modified: Option<Vec<u8>>,
    /// Packets to send first, in order.
    pub send: Vec<Vec<u8>>,
    /// The action is done with this direction of the flow (its instance's cutoff).
    pub cutoff: bool,
}

impl Output {
    /// Pass the original, send nothing.
    pub fn pass() -> Output {
        Output {
            verdict: Verdict::Pass,
            modified: None,
            send: Vec::new(),
            cutoff: false,
        }
    }
}

/// A configuration error, naming the function and the argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ActionError {
    UnknownFunction(String),
    Unsupported {
        func: String,
        reason: String,
    },
    UnknownArg {
        func: String,
        arg: String,
    },
    MissingArg {
        func: String,
        arg: String,
    },
    BadArg {
        func: String,
        arg: String,
        value: String,
        reason: String,
    },
}

impl fmt::Display for ActionError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            ActionError::UnknownFunction(n) => write!(f, "unknown desync function '{n}'"),
            ActionError::Unsupported { func, reason } => write!(f, "{func}: {reason}"),
            ActionError::UnknownArg { func, arg } => write!(f, "{func}: unknown argument '{arg}'"),
            ActionError::MissingArg { func, arg } => {
                write!(f, "{func}: argument '{arg}' is required")
            }
            ActionError::BadArg {
                func,
                arg,
                value,
                reason,
            } => write!(f, "{func}: argument {arg}='{value}': {reason}"),
        }
    }
}

impl std::error::Error for ActionError {}

/// `ipfrag` options (nfqws2's "standard ipfrag" with its `ipfrag2` fragmenter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpFrag {
    /// Where to cut TCP / UDP packets: bytes after the IPv4 header or into the IPv6
    /// fragmentable part, a multiple of 8 (defaults 32 and 8).
    pub pos_tcp: usize,
    pub pos_udp: usize,
    /// Next header of the second IPv6 fragment's fragment header.
    pub next: Option<u8>,
    /// Send the fragments last first.
    pub disorder: bool,
}

/// The options every action reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Common {
    pub fooling: Fooling,
    pub ip_id: IpId,
    pub repeats: u32,
    pub badsum: bool,
    pub ipfrag: Option<IpFrag>,
}

/// seqovl: a number (multisplit, fakedsplit, tcpseg) or a marker (multidisorder,
/// fakeddisorder).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seqovl {
    None,
    Num(u32),
    Marker(Marker),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SplitArgs {
    pub pos: Vec<Marker>,
    pub seqovl: Seqovl,
    pub seqovl_pattern: Option<BlobRef>,
    pub blob: Option<BlobRef>,
    pub optional: bool,
    pub nodrop: bool,
    pub pattern: Option<BlobRef>,
    pub nofake: [bool; 4],
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Fake {
        blob: BlobRef,
        optional: bool,
    },
    Rst {
        rstack: bool,
    },
    Multisplit(SplitArgs),
    Multidisorder(SplitArgs),
    Fakedsplit(SplitArgs),
    Fakeddisorder(SplitArgs),
    Tcpseg(SplitArgs),
    Hostfakesplit {
        host: Option<String>,
        midhost: Option<Marker>,
        disorder_after: Option<Marker>,
        nofake: [bool; 2],
        blob: Option<BlobRef>,
        optional: bool,
        nodrop: bool,
    },
    Syndata {
        blob: Option<BlobRef>,
    },
    Wsize {
        wsize: Option<u16>,
        scale: Option<u8>,
    },
    Udplen {
        min: Option<usize>,
        max: Option<usize>,
        increment: i32,
        pattern: Option<BlobRef>,
        pattern_offset: usize,
    },
    Ipfrag,
    Send,
    Pktmod,
    Drop,
    Oob {
        byte: u8,
        urp: oob::Urp,
    },
}

/// A desync function with its arguments, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    name: String,
    pub(crate) kind: Kind,
    pub(crate) common: Common,
}

fn split_args(a: &mut Args, name: &str, marker_seqovl: bool) -> Result<SplitArgs, ActionError> {
    let pos = a.markers("pos")?.unwrap_or_else(|| {
        vec![Marker::parse("2").unwrap_or(Marker {
            base: markers::Base::Abs,
            offset: 2,
        })]
    });
    if matches!(name, "fakedsplit" | "fakeddisorder") && pos.len() != 1 {
        return Err(a.bad("pos", "", "expects a single marker"));
    }
    let seqovl = if marker_seqovl {
        a.marker("seqovl")?.map_or(Seqovl::None, Seqovl::Marker)
    } else {
        match a.num::<u32>("seqovl")? {
            Some(n) if n > 0 => Seqovl::Num(n),
            _ => Seqovl::None,
        }
    };
    Ok(SplitArgs {
        pos,
        seqovl,
        seqovl_pattern: a.blob("seqovl_pattern")?,
        blob: a.blob("blob")?,
        optional: a.flag("optional"),
        nodrop: a.flag("nodrop"),
        pattern: a.blob("pattern")?,
        nofake: [
            a.flag("nofake1"),
            a.flag("nofake2"),
            a.flag("nofake3"),
            a.flag("nofake4"),
        ],
    })
}

impl Action {
    /// Parse a function call as nfqws2's `--lua-desync=name:arg=value:flag`.
    pub fn parse(name: &str, args: &[(String, String)]) -> Result<Action, ActionError> {
        let mut a = Args::new(name, args);
        let def_id = if matches!(name, "rst" | "send" | "pktmod") {
            IpId::None
        } else {
            IpId::Seq
        };
        let ip_id = match a.get("ip_id") {
            None => def_id,
            Some("seq") => IpId::Seq,
            Some("rnd") => IpId::Rnd,
            Some("zero") => IpId::Zero,
            Some("none") => IpId::None,
            Some(v) => return Err(a.bad("ip_id", v, "expected seq, rnd, zero or none")),
        };
        let fooling = Fooling::parse(&mut a)?;
        let repeats = a.num::<u32>("repeats")?.unwrap_or(1);
        if repeats > 1000 {
            return Err(a.bad("repeats", &repeats.to_string(), "at most 1000"));
        }
        let badsum = a.flag("badsum");
        let pos_tcp = a.num::<usize>("ipfrag_pos_tcp")?.unwrap_or(32);
        let pos_udp = a.num::<usize>("ipfrag_pos_udp")?.unwrap_or(8);
        for (k, v) in [("ipfrag_pos_tcp", pos_tcp), ("ipfrag_pos_udp", pos_udp)] {
            if v == 0 || v % 8 != 0 || v > 0xfff0 {
                return Err(a.bad(k, &v.to_string(), "must be a positive multiple of 8"));
            }
        }
        let next = a.num::<u8>("ipfrag_next")?;
        let disorder = a.flag("ipfrag_disorder");
        let ipfrag_on = match a.get("ipfrag") {
            None => name == "ipfrag",
            Some("") | Some("ipfrag2") => true,
            Some(v) => return Err(a.bad("ipfrag", v, "only the ipfrag2 fragmenter exists")),
        };
        let ipfrag = ipfrag_on.then_some(IpFrag {
            pos_tcp,
            pos_udp,
            next,
            disorder,
        });
        let common = Common {
            fooling,
            ip_id,
            repeats,
            badsum,
            ipfrag,
        };
        let kind = match name {
            "fake" => Kind::Fake {
                blob: a.blob("blob")?.ok_or_else(|| ActionError::MissingArg {
                    func: name.to_string(),
                    arg: "blob".to_string(),
                })?,
                optional: a.flag("optional"),
            },
            "rst" => Kind::Rst {
                rstack: a.flag("rstack"),
            },
            "multisplit" => Kind::Multisplit(split_args(&mut a, name, false)?),
            "multidisorder" => Kind::Multidisorder(split_args(&mut a, name, true)?),
            "fakedsplit" => Kind::Fakedsplit(split_args(&mut a, name, false)?),
            "fakeddisorder" => Kind::Fakeddisorder(split_args(&mut a, name, true)?),
            "tcpseg" => {
                if a.get("pos").is_none() {
                    return Err(ActionError::MissingArg {
                        func: name.to_string(),
                        arg: "pos".to_string(),
                    });
                }
                let s = split_args(&mut a, name, false)?;
                if s.pos.len() != 2 {
                    return Err(a.bad("pos", "", "expects exactly 2 markers"));
                }
                Kind::Tcpseg(s)
            }
            "hostfakesplit" => {
                let disorder_after = match a.get("disorder_after") {
                    None => None,
                    Some("") => Marker::parse("-1"),
                    Some(_) => a.marker("disorder_after")?,
                };
                Kind::Hostfakesplit {
                    host: a.get("host").map(str::to_string),
                    midhost: a.marker("midhost")?,
                    disorder_after,
                    nofake: [a.flag("nofake1"), a.flag("nofake2")],
                    blob: a.blob("blob")?,
                    optional: a.flag("optional"),
                    nodrop: a.flag("nodrop"),
                }
            }
            "syndata" => Kind::Syndata {
                blob: a.blob("blob")?,
            },
            "wsize" => Kind::Wsize {
                wsize: a.num("wsize")?,
                scale: a.num("scale")?,
            },
            "udplen" => Kind::Udplen {
                min: a.num("min")?,
                max: a.num("max")?,
                increment: a.num("increment")?.unwrap_or(2),
                pattern: a.blob("pattern")?,
                pattern_offset: a.num("pattern_offset")?.unwrap_or(0),
            },
            "ipfrag" => Kind::Ipfrag,
            "send" => Kind::Send,
            "pktmod" => Kind::Pktmod,
            "drop" => Kind::Drop,
            "oob" => {
                let byte = match (a.get("char"), a.num::<u8>("byte")?) {
                    (Some(c), _) if c.len() == 1 => c.as_bytes()[0],
                    (Some(c), _) => return Err(a.bad("char", c, "must be exactly one byte")),
                    (None, Some(b)) => b,
                    (None, None) => 0,
                };
                let urp = match a.get("urp") {
                    None | Some("b") => oob::Urp::Begin,
                    Some("e") => oob::Urp::End,
                    Some(_) => oob::Urp::At(
                        a.marker("urp")?
                            .ok_or_else(|| a.bad("urp", "", "expected b, e or a marker"))?,
                    ),
                };
                Kind::Oob { byte, urp }
            }
            "synack" | "synack_split" | "wssize" | "multidisorder_legacy" => {
                return Err(ActionError::Unsupported {
                    func: name.to_string(),
                    reason: "not implemented in weir's native desync (use Lua)".to_string(),
                })
            }
            _ => return Err(ActionError::UnknownFunction(name.to_string())),
        };
        a.finish()?;
        Ok(Action {
            name: name.to_string(),
            kind,
            common,
        })
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The options every action reads.
    pub fn common(&self) -> &Common {
        &self.common
    }
}

/// How a packet is sent: with the full fooling options (else only `tcp_ts_up`), repeated,
/// fragmented when `ipfrag` is set.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Opts {
    pub fool: bool,
    pub repeats: bool,
    pub ipfrag: bool,
}

impl Opts {
    /// nfqws2's `desync_opts`: everything.
    pub const FULL: Opts = Opts {
        fool: true,
        repeats: true,
        ipfrag: true,
    };
    /// Fakes among real parts: fooling and repeats, no ipfrag.
    pub const FAKE: Opts = Opts {
        fool: true,
        repeats: true,
        ipfrag: false,
    };
    /// Real parts among fakes: nothing but ip_id and `tcp_ts_up`.
    pub const ORIG: Opts = Opts {
        fool: false,
        repeats: false,
        ipfrag: false,
    };
}

/// The state of one application: the packet, the options, what is to be sent.
pub(crate) struct Ctx<'a> {
    pub d: Dissect<'a>,
    pub input: &'a Input<'a>,
    pub common: &'a Common,
    pub blobs: &'a Blobs,
    pub out: Vec<Vec<u8>>,
    pub modified: Option<Vec<u8>>,
    /// Where the packet lies in its connection.
    pub pos: FlowPos,
    /// The action asks for its cutoff.
    pub cutoff: bool,
    next_id: u16,
    rnd: u64,
}

impl<'a> Ctx<'a> {
    fn new(d: Dissect<'a>, input: &'a Input<'a>, common: &'a Common, blobs: &'a Blobs) -> Self {
        let id = if d.v6 {
            0
        } else {
            u16::from_be_bytes([d.ip[4], d.ip[5]])
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for b in d.l4.iter().take(8).chain(d.ip.iter().skip(4).take(2)) {
            seed = (seed ^ *b as u64).wrapping_mul(0x100_0000_01b3);
        }
        Ctx {
            d,
            input,
            common,
            blobs,
            out: Vec::new(),
            modified: None,
            pos: FlowPos::default(),
            cutoff: false,
            next_id: id.wrapping_add(1),
            rnd: seed,
        }
    }

    /// Pseudo-random numbers (splitmix64; not for secrets).
    pub fn random(&mut self) -> u64 {
        self.rnd = self.rnd.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rnd;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The original's headers with `payload` and sequence number + `seq_off` (TCP), sent
    /// with `o`. False if it cannot be (headers too long to carry data, lengths too big).
    pub fn send_payload(&mut self, payload: &[u8], seq_off: i64, o: Opts) -> bool {
        let mut s = Seg::from(&self.d);
        s.payload.clear();
        if s.is_tcp() {
            s.set_seq(s.seq().wrapping_add(seq_off as u32));
        }
        self.send_seg(s, payload, o)
    }

    /// Apply options to `s`, give it `payload` (cut by MSS for TCP) and send.
    pub fn send_seg(&mut self, mut s: Seg, payload: &[u8], o: Opts) -> bool {
        if o.fool {
            self.common.fooling.apply(&mut s, self.input.incoming_ttl);
            s.badsum = self.common.badsum;
        } else {
            self.common.fooling.apply_ts_up(&mut s);
        }
        if !s.is_tcp() || payload.is_empty() {
            s.payload = payload.to_vec();
            return self.emit(s, o);
        }
        let extra = s.extra_len();
        if extra >= DEFAULT_MSS {
            return false;
        }
        let max = (DEFAULT_MSS - extra).max(self.d.payload.len()).max(1);
        for c in payload.chunks(max) {
            let mut p = s.clone();
            p.payload = c.to_vec();
            if !self.emit(p, o) {
                return false;
            }
            s.set_seq(s.seq().wrapping_add(c.len() as u32));
        }
        true
    }

    /// Number (ip_id), build, fragment, repeat.
    pub fn emit(&mut self, mut s: Seg, o: Opts) -> bool {
        match self.common.ip_id {
            IpId::Seq => {
                s.set_ip_id(self.next_id);
                self.next_id = self.next_id.wrapping_add(1);
            }
            IpId::Rnd => {
                let r = (self.random() as u16).max(1);
                s.set_ip_id(r);
            }
            IpId::Zero => s.set_ip_id(0),
            IpId::None => {}
        }
        let Some(pkt) = s.build() else {
            return false;
        };
        let mut pieces = vec![];
        if let (true, Some(f)) = (o.ipfrag, &self.common.ipfrag) {
            let pos = if s.is_tcp() { f.pos_tcp } else { f.pos_udp };
            let id = (self.random() as u32).max(1);
            if let Some((a, b)) = tcp::ip_fragment(&pkt, s.v6, pos, f.next, id) {
                if f.disorder {
                    pieces.push(b);
                    pieces.push(a);
                } else {
                    pieces.push(a);
                    pieces.push(b);
                }
            }
        }
        if pieces.is_empty() {
            pieces.push(pkt);
        }
        let n = if o.repeats {
            self.common.repeats.max(1)
        } else {
            1
        };
        for p in pieces {
            for _ in 1..n {
                self.out.push(p.clone());
            }
            self.out.push(p);
        }
        true
    }

    /// The bytes of a blob reference (None: a name not in the collection).
    pub fn blob(&self, r: &BlobRef) -> Option<Vec<u8>> {
        self.blobs.resolve(r).map(|b| b.to_vec())
    }
}

/// The payload filter and direction an action takes when its instance does not say
/// (`payload=`, `dir=`), as nfqws2's functions default them: `known` payloads going out for
/// most; every packet of both directions for `drop`, `send`, `pktmod`, `wsize` (the
/// server's SYN,ACK), `syndata` (the SYN) and `oob`; `rst` both directions, known payloads.
/// A Lua function: `known`, out.
pub fn defaults(name: &str) -> (crate::profile::PayloadFilter, crate::scripts::Direction) {
    use crate::profile::PayloadFilter as P;
    use crate::scripts::Direction as D;
    match name {
        "drop" | "send" | "pktmod" | "wsize" | "syndata" | "oob" => (P::All, D::Any),
        "rst" => (P::Known, D::Any),
        _ => (P::Known, D::Out),
    }
}

/// Run `action` on the packet of `input`. Never panics; see the module's ordering contract.
pub fn apply(action: &Action, input: &Input, blobs: &Blobs) -> Output {
    apply_at(action, input, FlowPos::default(), blobs)
}

/// [`apply`] with where the packet lies in its connection.
pub fn apply_at(action: &Action, input: &Input, pos: FlowPos, blobs: &Blobs) -> Output {
    let Some(d) = Dissect::parse(input.packet) else {
        return Output::pass();
    };
    let mut ctx = Ctx::new(d, input, &action.common, blobs);
    ctx.pos = pos;
    let v = match &action.kind {
        Kind::Fake { blob, optional } => fake::fake(&mut ctx, blob, *optional),
        Kind::Rst { rstack } => fake::rst(&mut ctx, *rstack),
        Kind::Syndata { blob } => fake::syndata(&mut ctx, blob.as_ref()),
        Kind::Multisplit(s) => split::multisplit(&mut ctx, s),
        Kind::Multidisorder(s) => split::multidisorder(&mut ctx, s),
        Kind::Fakedsplit(s) => split::fakedsplit(&mut ctx, s),
        Kind::Fakeddisorder(s) => split::fakeddisorder(&mut ctx, s),
        Kind::Tcpseg(s) => split::tcpseg(&mut ctx, s),
        Kind::Hostfakesplit {
            host,
            midhost,
            disorder_after,
            nofake,
            blob,
            optional,
            nodrop,
        } => split::hostfakesplit(
            &mut ctx,
            &split::HostFake {
                host: host.as_deref(),
                midhost: *midhost,
                disorder_after: *disorder_after,
                nofake: *nofake,
                blob: blob.as_ref(),
                optional: *optional,
                nodrop: *nodrop,
            },
        ),
        Kind::Wsize { wsize, scale } => misc::wsize(&mut ctx, *wsize, *scale),
        Kind::Udplen {
            min,
            max,
            increment,
            pattern,
            pattern_offset,
        } => misc::udplen(
            &mut ctx,
            *min,
            *max,
            *increment,
            pattern.as_ref(),
            *pattern_offset,
        ),
        Kind::Ipfrag => misc::ipfrag(&mut ctx),
        Kind::Send => misc::send(&mut ctx),
        Kind::Pktmod => misc::pktmod(&mut ctx),
        Kind::Drop => Some(Verdict::Drop),
        Kind::Oob { byte, urp } => oob::oob(&mut ctx, *byte, *urp),
    };
    match v {
        None => Output {
            cutoff: ctx.cutoff,
            ..Output::pass()
        },
        Some(verdict) => Output {
            verdict,
            modified: if verdict == Verdict::Modify {
                ctx.modified
            } else {
                None
            },
            send: ctx.out,
            cutoff: ctx.cutoff,
        },
    }
}

/// `packet`'s IP and TCP/UDP headers with `payload` instead of its own, the lengths and
/// checksums made right (None: not a packet the actions can parse, or too long).
pub fn with_payload(packet: &[u8], payload: &[u8]) -> Option<Vec<u8>> {
    let d = Dissect::parse(packet)?;
    let mut s = Seg::from(&d);
    s.payload = payload.to_vec();
    s.build()
}

/// A TCP packet cut into segments of at most `max` payload bytes each (sequence numbers
/// following, checksums made), in order; the packet alone when it is short enough or not
/// TCP.
pub fn resegment(packet: &[u8], max: usize) -> Vec<Vec<u8>> {
    let Some(d) = Dissect::parse(packet) else {
        return vec![packet.to_vec()];
    };
    if !d.is_tcp() || d.payload.len() <= max.max(1) {
        return vec![packet.to_vec()];
    }
    let mut s = Seg::from(&d);
    let seq = s.seq();
    let mut out = Vec::new();
    for (i, c) in d.payload.chunks(max.max(1)).enumerate() {
        s.set_seq(seq.wrapping_add((i * max.max(1)) as u32));
        s.payload = c.to_vec();
        match s.build() {
            Some(p) => out.push(p),
            None => return vec![packet.to_vec()],
        }
    }
    out
}
