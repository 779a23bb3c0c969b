//! The control plane: `weir ctl`'s requests ([`Request`], parsed from the words of a line on
//! the control socket), what a worker answers ([`Reply`], typed), how the answers of all the
//! workers become one text ([`render`]), the socket ([`serve_socket`]) and the client
//! ([`ask`]). The metrics endpoint is [`metrics`].

pub mod metrics;

use crate::stats::{ProcessStats, WorkerStats};
use anyhow::Context;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use weir_wire::Addr;

/// How long `weir ctl trace` waits for its packets.
pub const TRACE_SECONDS: u64 = 30;

/// Which connections or packets a `ct` or `trace` command means: `proto P`, `addr A` (source
/// or destination, either direction), `port N` (likewise); all that are given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub proto: Option<u8>,
    pub addr: Option<Addr>,
    pub port: Option<u16>,
}

impl Filter {
    pub fn parse(w: &[&str]) -> Result<Filter, String> {
        let mut f = Filter::default();
        let mut i = 0;
        while i < w.len() {
            let v = w
                .get(i + 1)
                .ok_or_else(|| format!("'{}' needs a value", w[i]))?;
            match w[i] {
                "proto" => {
                    f.proto = Some(match *v {
                        "tcp" => 6,
                        "udp" => 17,
                        "icmp" => 1,
                        "icmpv6" => 58,
                        n => n
                            .parse()
                            .map_err(|_| format!("proto {n}: tcp, udp, icmp or a number"))?,
                    })
                }
                "addr" => {
                    f.addr = Some(
                        v.parse::<Addr>()
                            .map_err(|_| format!("addr {v}: an IPv4 or IPv6 address"))?,
                    );
                }
                "port" => f.port = Some(v.parse().map_err(|_| format!("port {v}: 0-65535"))?),
                other => return Err(format!("unknown filter '{other}' (proto, addr, port)")),
            }
            i += 2;
        }
        Ok(f)
    }

    /// Against the tuples of one direction or both.
    pub fn matches(&self, ts: &[weir_conntrack::Tuple]) -> bool {
        let addr_of = |t: &weir_conntrack::Tuple, v: u128| {
            Addr::new(
                if t.v6 {
                    weir_wire::Family::Ipv6
                } else {
                    weir_wire::Family::Ipv4
                },
                v,
            )
        };
        self.proto.is_none_or(|p| ts.iter().any(|t| t.proto == p))
            && self.addr.is_none_or(|a| {
                ts.iter()
                    .any(|t| addr_of(t, t.src) == a || addr_of(t, t.dst) == a)
            })
            && self
                .port
                .is_none_or(|p| ts.iter().any(|t| t.sport == p || t.dport == p))
    }
}

/// An element of a set for `set add|del` (its words, `a . b` for a concatenation) and its
/// timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetElement {
    pub text: String,
    pub timeout: Option<String>,
}

/// A request of `weir ctl`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Status,
    Reload,
    /// `weir nft`: a batch of nft commands (`-f FILE`, or the command line's words), named
    /// `name` in messages, applied to the running ruleset or (`check`) only checked.
    NftBatch {
        name: String,
        text: String,
        check: bool,
        /// `nft -e`: answer with what the batch added (with handles).
        echo: bool,
        /// `weir ctl diff FILE`: checked only, answered with what it would change.
        diff: bool,
        /// `nft -o`: the batch's chains merged by nft's optimizer first (`nft OP NAME
        /// optimize`), what was merged answered apart (for stderr).
        optimize: bool,
    },
    /// `weir nft list ruleset`: the running ruleset as nft lists it.
    NftList {
        json: bool,
        stateless: bool,
        numeric: bool,
        handles: bool,
    },
    Counters,
    Metrics,
    CtCount(Filter),
    CtList(usize, Filter),
    CtFlush(Filter),
    Trace(usize, Filter),
    SetAdd {
        family: String,
        table: String,
        set: String,
        element: SetElement,
    },
    SetDel {
        family: String,
        table: String,
        set: String,
        element: SetElement,
    },
    SetList {
        family: String,
        table: String,
        set: String,
    },
}

/// What `weir ctl` says when a request is not one.
pub const USAGE: &str = "error: commands: status | reload | counters | metrics | ct count|list [N]|flush [proto P] [addr A] [port N] | trace [N] [proto P] [addr A] [port N] | set add|del FAMILY TABLE SET ELEMENT [timeout T] | set list FAMILY TABLE SET\n";

impl Request {
    /// A request from the words of a control line (errors are the text `weir ctl` prints).
    pub fn parse(words: &[&str]) -> Result<Request, String> {
        let filter = |w: &[&str]| Filter::parse(w).map_err(|e| format!("error: {e}\n"));
        Ok(match words {
            ["nft", op @ ("apply" | "check" | "apply-echo" | "diff"), name, flags @ .., text]
                if flags.iter().all(|f| *f == "optimize") =>
            {
                Request::NftBatch {
                    name: name.to_string(),
                    text: text.to_string(),
                    check: matches!(*op, "check" | "diff"),
                    echo: *op == "apply-echo",
                    diff: *op == "diff",
                    optimize: !flags.is_empty(),
                }
            }
            ["nft", "list", flags @ ..] => Request::NftList {
                json: flags.contains(&"json"),
                stateless: flags.contains(&"stateless"),
                numeric: flags.contains(&"numeric"),
                handles: flags.contains(&"handle"),
            },
            ["status"] => Request::Status,
            ["reload"] => Request::Reload,
            ["counters"] => Request::Counters,
            ["metrics"] => Request::Metrics,
            ["ct", "count", f @ ..] => Request::CtCount(filter(f)?),
            ["ct", "flush", f @ ..] => Request::CtFlush(filter(f)?),
            ["ct", "list", rest @ ..] => match rest.first().and_then(|n| n.parse().ok()) {
                Some(n) => Request::CtList(n, filter(&rest[1..])?),
                None => Request::CtList(100, filter(rest)?),
            },
            ["trace", rest @ ..] => match rest.first().and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => Request::Trace(n.max(1), filter(&rest[1..])?),
                None => Request::Trace(10, filter(rest)?),
            },
            ["set", op @ ("add" | "del" | "list"), fam, table, set, rest @ ..] => {
                let (family, table, set) = (fam.to_string(), table.to_string(), set.to_string());
                if *op == "list" {
                    Request::SetList { family, table, set }
                } else {
                    let (elem, timeout) = match rest {
                        [e @ .., "timeout", t] => (e, Some(t.to_string())),
                        e => (e, None),
                    };
                    let element = SetElement {
                        text: elem.join(" "),
                        timeout,
                    };
                    if *op == "add" {
                        Request::SetAdd {
                            family,
                            table,
                            set,
                            element,
                        }
                    } else {
                        Request::SetDel {
                            family,
                            table,
                            set,
                            element,
                        }
                    }
                }
            }
            _ => return Err(USAGE.into()),
        })
    }
}

/// A connection as `ct list` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnRow(pub String);

/// A packet a trace followed: where it was, the rules it hit, its verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traced {
    pub summary: String,
    pub rules: Vec<String>,
    pub verdict: String,
}

/// What one worker answers.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Stats(Box<WorkerStats>),
    Count(u64),
    Flushed(u64),
    Conns(Vec<ConnRow>),
    /// A set element added or removed (the word for it).
    SetChanged(&'static str),
    SetElements(Vec<String>),
    Trace(Vec<Traced>),
    Error(String),
}

/// The text of a request's answers from all the workers (in worker order), with the
/// process's own facts for `status` and `metrics`. The first error wins.
pub fn render(req: &Request, process: &ProcessStats, answers: &[Reply]) -> String {
    if let Some(Reply::Error(e)) = answers.iter().find(|a| matches!(a, Reply::Error(_))) {
        return format!("error: {e}\n");
    }
    let stats: Vec<WorkerStats> = answers
        .iter()
        .filter_map(|a| match a {
            Reply::Stats(s) => Some((**s).clone()),
            _ => None,
        })
        .collect();
    match req {
        Request::Status => {
            let mut out = process.status_head();
            for s in &stats {
                out.push_str(&s.status_line());
            }
            if let Some(sc) = &WorkerStats::sum(&stats).scripts {
                out.push_str(&sc.status_lines());
            }
            let packets = stats.iter().map(|s| s.counts.packets).sum();
            out.push_str(&process.per_packet(packets));
            out
        }
        Request::Counters => WorkerStats::sum(&stats).ruleset.counters_text(),
        Request::Metrics => metrics::render(process, &WorkerStats::sum(&stats)),
        Request::CtCount(_) => {
            let n: u64 = answers
                .iter()
                .map(|a| match a {
                    Reply::Count(n) => *n,
                    _ => 0,
                })
                .sum();
            format!("{n}\n")
        }
        Request::CtFlush(_) => {
            let n: u64 = answers
                .iter()
                .map(|a| match a {
                    Reply::Flushed(n) => *n,
                    _ => 0,
                })
                .sum();
            format!("flushed {n} entries\n")
        }
        Request::CtList(n, _) => answers
            .iter()
            .flat_map(|a| match a {
                Reply::Conns(v) => v.as_slice(),
                _ => &[],
            })
            .take(*n * answers.len().max(1))
            .map(|r| format!("{}\n", r.0))
            .collect(),
        Request::SetAdd { .. } | Request::SetDel { .. } => {
            // every worker makes the same change: one answer
            match answers.first() {
                Some(Reply::SetChanged(w)) => format!("{w}\n"),
                _ => String::new(),
            }
        }
        Request::SetList { .. } => answers
            .iter()
            .flat_map(|a| match a {
                Reply::SetElements(v) => v.as_slice(),
                _ => &[],
            })
            .map(|l| format!("{l}\n"))
            .collect(),
        Request::Trace(n, _) => {
            let traced: Vec<&Traced> = answers
                .iter()
                .flat_map(|a| match a {
                    Reply::Trace(v) => v.as_slice(),
                    _ => &[],
                })
                .take(*n)
                .collect();
            let mut out = String::new();
            for (i, t) in traced.iter().enumerate() {
                out.push_str(&format!("#{} {}\n", i + 1, t.summary));
                for r in &t.rules {
                    out.push_str(&format!("  rule {r}\n"));
                }
                out.push_str(&format!("  verdict {}\n", t.verdict));
            }
            if traced.len() < *n {
                out.push_str(&format!(
                    "(trace ended after {} packet(s): no more matched within {TRACE_SECONDS} s)\n",
                    traced.len()
                ));
            }
            out
        }
        Request::Reload | Request::NftBatch { .. } | Request::NftList { .. } => String::new(),
    }
}

/// A request on the control socket: the line's words and where the answer goes.
pub type CtlRequest = (Vec<String>, mpsc::Sender<String>);

/// Serve the control socket at `path` (mode 0600): each connection sends one line and gets
/// the answer.
pub fn serve_socket(path: PathBuf, tx: mpsc::Sender<CtlRequest>) -> anyhow::Result<()> {
    let _ = std::fs::remove_file(&path);
    let l =
        UnixListener::bind(&path).with_context(|| format!("control socket {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("control socket {}", path.display()))?;
    std::thread::Builder::new()
        .name("weir-control".into())
        .spawn(move || {
            for s in l.incoming().flatten() {
                let tx = tx.clone();
                let _ = serve(s, &tx);
            }
        })?;
    Ok(())
}

fn serve(s: UnixStream, tx: &mpsc::Sender<CtlRequest>) -> std::io::Result<()> {
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    let mut line = String::new();
    let mut r = BufReader::new(&s);
    r.read_line(&mut line)?;
    let mut words: Vec<String> = line.split_whitespace().map(String::from).collect();
    // `nft monitor [trace]`: the event stream, on a thread of its own until the client goes
    if words.len() >= 2 && words[0] == "nft" && words[1] == "monitor" {
        let trace_only = words.get(2).is_some_and(|w| w == "trace");
        let rx = crate::monitor::hub().subscribe(crate::monitor::Wants {
            changes: !trace_only,
            traces: true,
        });
        std::thread::Builder::new()
            .name("weir-monitor".into())
            .spawn(move || {
                // (the header, then each event as it comes; a closed client ends it)
                if (&s).write_all(b"ok\n").is_err() {
                    return;
                }
                loop {
                    match rx.recv_timeout(std::time::Duration::from_secs(1)) {
                        Ok(text) => {
                            if (&s).write_all(text.as_bytes()).is_err() {
                                return;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            // (the client sends nothing more: end of stream is its leaving)
                            let _ = s.set_nonblocking(true);
                            let mut b = [0u8; 64];
                            let gone = matches!(std::io::Read::read(&mut &s, &mut b), Ok(0))
                                || matches!(std::io::Read::read(&mut &s, &mut b), Err(e) if e.kind() != std::io::ErrorKind::WouldBlock);
                            let _ = s.set_nonblocking(false);
                            if gone {
                                return;
                            }
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        return Ok(());
    }
    // `nft apply|check NAME [optimize]` is followed by the batch, to the end of the stream
    if (words.len() == 3 || words.len() == 4)
        && words[0] == "nft"
        && matches!(words[1].as_str(), "apply" | "check" | "apply-echo" | "diff")
    {
        let mut body = String::new();
        std::io::Read::read_to_string(
            &mut std::io::Read::take(&mut r, MAX_BATCH as u64),
            &mut body,
        )?;
        words.push(body);
    }
    let (rtx, rrx) = mpsc::channel();
    if tx.send((words, rtx)).is_err() {
        return Ok(());
    }
    let reply = rrx
        .recv_timeout(std::time::Duration::from_secs(TRACE_SECONDS + 10))
        .unwrap_or_else(|_| "error: no answer from the dataplane\n".into());
    (&s).write_all(reply.as_bytes())
}

/// The largest batch `weir nft` may send (bytes).
pub const MAX_BATCH: usize = 64 << 20;

/// `weir nft`: send a request line and a body (a batch) to a running weir; its answer.
pub fn ask_with_body(socket: &Path, line: &str, body: &str) -> anyhow::Result<String> {
    let mut s = UnixStream::connect(socket)
        .with_context(|| format!("control socket {} (is weir running?)", socket.display()))?;
    s.write_all(format!("{line}\n").as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    Ok(out)
}

/// `weir ctl`: send a command to a running weir and return its answer.
pub fn ask(socket: &Path, words: &[String]) -> anyhow::Result<String> {
    let mut s = UnixStream::connect(socket)
        .with_context(|| format!("control socket {} (is weir running?)", socket.display()))?;
    s.write_all(format!("{}\n", words.join(" ")).as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(Request::parse(&["status"]), Ok(Request::Status));
        assert_eq!(
            Request::parse(&["ct", "list", "5", "proto", "udp"]),
            Ok(Request::CtList(
                5,
                Filter {
                    proto: Some(17),
                    ..Filter::default()
                }
            ))
        );
        assert_eq!(
            Request::parse(&["ct", "list"]),
            Ok(Request::CtList(100, Filter::default()))
        );
        assert_eq!(
            Request::parse(&["trace", "0"]),
            Ok(Request::Trace(1, Filter::default()))
        );
        assert!(matches!(
            Request::parse(&["set", "add", "inet", "f", "s", "198.18.0.1", ".", "80", "timeout", "1h"]),
            Ok(Request::SetAdd { element, .. }) if element.text == "198.18.0.1 . 80" && element.timeout.as_deref() == Some("1h")
        ));
        assert_eq!(Request::parse(&["nope"]), Err(USAGE.to_string()));
        assert!(Request::parse(&["ct", "count", "colour", "red"])
            .unwrap_err()
            .starts_with("error: unknown filter"));
    }

    #[test]
    fn filters_parse_and_match() {
        let f = Filter::parse(&["proto", "udp", "addr", "198.18.0.1", "port", "53"]).unwrap();
        let t = weir_conntrack::Tuple {
            zone: 0,
            src: u32::from(std::net::Ipv4Addr::new(198, 18, 0, 1)) as u128,
            dst: 7,
            sport: 40000,
            dport: 53,
            proto: 17,
            v6: false,
        };
        assert!(f.matches(&[t]));
        assert!(!f.matches(&[weir_conntrack::Tuple { proto: 6, ..t }]));
        assert!(!f.matches(&[weir_conntrack::Tuple { dport: 54, ..t }]));
        assert!(!f.matches(&[weir_conntrack::Tuple { v6: true, ..t }]));
        assert!(Filter::parse(&["proto"]).is_err());
        assert!(Filter::parse(&["port", "70000"]).is_err());
        assert!(Filter::parse(&["colour", "red"]).is_err());
    }

    #[test]
    fn answers_of_workers_render_as_one() {
        let p = ProcessStats::default();
        let r = Request::CtCount(Filter::default());
        assert_eq!(render(&r, &p, &[Reply::Count(2), Reply::Count(5)]), "7\n");
        let r = Request::CtFlush(Filter::default());
        assert_eq!(
            render(&r, &p, &[Reply::Flushed(2), Reply::Flushed(1)]),
            "flushed 3 entries\n"
        );
        assert!(
            render(&r, &p, &[Reply::Flushed(2), Reply::Error("no".into())])
                .starts_with("error: no")
        );
        let t = Request::Trace(3, Filter::default());
        let one = |s: &str| Traced {
            summary: s.into(),
            rules: vec!["inet f fwd handle 1: accept".into()],
            verdict: "accept".into(),
        };
        let out = render(
            &t,
            &p,
            &[Reply::Trace(vec![one("a")]), Reply::Trace(vec![one("b")])],
        );
        assert!(
            out.starts_with("#1 a\n  rule inet f fwd handle 1: accept\n  verdict accept\n#2 b\n")
        );
        assert!(out.ends_with("(trace ended after 2 packet(s): no more matched within 30 s)\n"));
    }
}
