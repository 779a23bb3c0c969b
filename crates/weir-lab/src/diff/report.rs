//! Reports: each packet's status ([`Status`], [`PacketReport`]), the comparison of a whole
//! capture ([`compare_all`]) with the known differences that explain a difference, running
//! one case in the lab and writing a reproducer folder.

use super::describe::{compare, describe_frame, describe_kernel, describe_prediction, ifname};
use super::known::{KnownDifference, KNOWN};
use super::observed::{kernel_view, KernelView};
use crate::kernel::{Injection, Lab};
use crate::model::{EngineMode, Model, ModelState, Prepared, Variant};
use crate::topology::{Router, Topology};
use crate::Error;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use weir_lang::ir;
use weir_wire::pcap::PcapWriter;
use weir_wire::LinkType;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Same,
    Different,
    /// Explained by the known difference(s) with this id (several: joined by `+`).
    Explained(String),
    /// Not injected (why).
    Skipped(String),
}

impl Status {
    pub fn name(&self) -> &'static str {
        match self {
            Status::Same => "same",
            Status::Different => "different",
            Status::Explained(_) => "explained",
            Status::Skipped(_) => "skipped",
        }
    }
}

#[derive(Clone, Debug)]
pub struct PacketReport {
    /// 1-based, as in Wireshark.
    pub number: usize,
    pub iif: String,
    pub packet: String,
    pub weir: String,
    pub kernel: String,
    pub status: Status,
    pub details: Vec<String>,
    /// What the kernel did: `forwarded`, `local` or `dropped` (`-` when skipped).
    pub kernel_fate: &'static str,
}

impl PacketReport {
    pub fn to_json(&self) -> Value {
        let mut o = json!({"number": self.number, "iif": self.iif, "packet": self.packet, "status": self.status.name(),
                           "weir": self.weir, "kernel": self.kernel});
        if !self.details.is_empty() {
            o["differences"] = json!(self.details);
        }
        match &self.status {
            Status::Explained(id) => o["explained_by"] = json!(id),
            Status::Skipped(why) => o["skipped"] = json!(why),
            _ => {}
        }
        o
    }

    /// Several lines of text.
    pub fn text(&self) -> String {
        let mut s = format!(
            "#{} {} (in {})\n    weir:   {}\n    kernel: {}\n",
            self.number, self.packet, self.iif, self.weir, self.kernel
        );
        for d in &self.details {
            s.push_str(&format!("    - {d}\n"));
        }
        if let Status::Explained(id) = &self.status {
            s.push_str(&format!("    explained: {id} (KNOWN_DIFFERENCES.md)\n"));
        }
        s
    }
}

/// The comparison of one ruleset and capture.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub packets: Vec<PacketReport>,
    pub late: usize,
    pub barrier_misses: usize,
    pub kernel_seconds: f64,
}

impl Report {
    fn count(&self, f: impl Fn(&Status) -> bool) -> usize {
        self.packets.iter().filter(|p| f(&p.status)).count()
    }
    pub fn injected(&self) -> usize {
        self.count(|s| !matches!(s, Status::Skipped(_)))
    }
    pub fn differences(&self) -> usize {
        self.count(|s| *s == Status::Different)
    }
    pub fn explained(&self) -> usize {
        self.count(|s| matches!(s, Status::Explained(_)))
    }
    pub fn skipped(&self) -> usize {
        self.count(|s| matches!(s, Status::Skipped(_)))
    }
    pub fn same(&self) -> usize {
        self.count(|s| *s == Status::Same)
    }
}

/// Compare a whole capture (pure: no root, testable with synthetic observations). `text` is
/// the ruleset's source, for the known differences explained by a rewrite.
pub fn compare_all(
    rs: &ir::Ruleset,
    text: Option<&str>,
    router: &Router,
    prepared: &[Prepared],
    inj: &Injection,
) -> Report {
    let mut model = Model::new(rs, router.clone());
    // the rewritten rulesets' models, built when a difference needs them
    let mut rewritten: Vec<Option<Option<(Model, usize)>>> =
        (0..KNOWN.len()).map(|_| None).collect();
    let mut rep = Report {
        late: inj.late.len(),
        barrier_misses: inj.barrier_misses,
        kernel_seconds: inj.seconds,
        ..Report::default()
    };
    for (p, ob) in prepared.iter().zip(&inj.observed) {
        let iif = ifname(router, p.iif).to_string();
        if let Some(why) = &p.skip {
            rep.packets.push(PacketReport {
                number: p.index + 1,
                iif,
                packet: "-".into(),
                weir: "-".into(),
                kernel: "-".into(),
                status: Status::Skipped(why.clone()),
                details: Vec::new(),
                kernel_fate: "-",
            });
            continue;
        }
        let kv = kernel_view(p, ob);
        // a packet is predicted again (variants) from the state before it: connections, and
        // with or without connection tracking the sets, limits and quotas
        let before = model.save();
        let pred = model.predict(p, Variant::WEIR, EngineMode::Compiled);
        let lin = model.predict(p, Variant::WEIR, EngineMode::Linear);
        let mut details = compare(router, &pred, &kv);
        if lin.fate != pred.fate {
            details.push(format!(
                "weir's compiled classifier and linear reference disagree: linear says {}",
                describe_prediction(router, &lin)
            ));
        }
        let mut status = if details.is_empty() {
            Status::Same
        } else {
            Status::Different
        };
        if status == Status::Different
            && pred.why.ends_with(crate::model::NAT_PORT_NOTE)
            && details.iter().all(|d| {
                d.starts_with("ports: ")
                    || d.starts_with("transport checksum: ")
                    // an ICMP error quotes the connection's packet, port included
                    || (d.starts_with("transport payload differs") && p.frame_is_icmp_error())
            })
        {
            status = Status::Explained("nat-random-port".into());
        }
        if status == Status::Different && lin.fate == pred.fate {
            let after = model.save();
            let cx = ExplainCx {
                before: &before,
                history: &prepared[..p.index.min(prepared.len())],
            };
            status = explain(rs, &mut model, &mut rewritten, text, router, p, &kv, &cx)
                .map(Status::Explained)
                .unwrap_or(Status::Different);
            model.restore(&after);
        }
        rep.packets.push(PacketReport {
            number: p.index + 1,
            iif,
            packet: describe_frame(&p.frame),
            weir: describe_prediction(router, &pred),
            kernel: describe_kernel(router, &kv),
            status,
            details,
            kernel_fate: if !kv.forwarded.is_empty() {
                "forwarded"
            } else if kv.local {
                "local"
            } else {
                "dropped"
            },
        });
    }
    rep
}

/// The known difference(s) whose model variant predicts what the kernel did. Variants run on
/// weir's linear reference: the compiled classifier folds some of weir's own rules into its
/// index (`th dport` implies TCP/UDP/SCTP/DCCP/UDP-Lite), which the variants change.
/// What re-predicting a packet needs: the model's state before it, and the packets before it
/// (a rewritten or replaying model runs them first).
struct ExplainCx<'a> {
    before: &'a ModelState,
    history: &'a [Prepared],
}

#[allow(clippy::too_many_arguments)]
fn explain(
    rs: &ir::Ruleset,
    model: &mut Model,
    rewritten: &mut [Option<Option<(Model, usize)>>],
    text: Option<&str>,
    router: &Router,
    p: &Prepared,
    kv: &KernelView,
    cx: &ExplainCx,
) -> Option<String> {
    // every combination of the packet-level variants, smallest first, on the ruleset as it is
    // and on each rewrite
    let n = KNOWN.len();
    let mut masks: Vec<u32> = (1..(1u32 << n)).collect();
    masks.sort_by_key(|m| (m.count_ones(), *m));
    for m in masks {
        let ks: Vec<&KnownDifference> = KNOWN
            .iter()
            .enumerate()
            .filter(|(i, _)| m & (1 << i) != 0)
            .map(|(_, k)| k)
            .collect();
        let rw: Vec<usize> = KNOWN
            .iter()
            .enumerate()
            .filter(|(i, k)| {
                m & (1 << i) != 0 && (k.rewrite.is_some() || k.fix.is_some() || k.replays)
            })
            .map(|(i, _)| i)
            .collect();
        if rw.len() > 1 {
            continue;
        }
        let mut v = Variant::WEIR;
        for k in &ks {
            v = v.union(k.variant);
        }
        let ids: Vec<&str> = ks.iter().map(|k| k.id).collect();
        let pred = match rw.first() {
            None => {
                model.restore(cx.before);
                model.predict(p, v, EngineMode::Linear)
            }
            Some(&i) => {
                let slot = &mut rewritten[i];
                if slot.is_none() {
                    *slot = Some(match (KNOWN[i].rewrite, KNOWN[i].fix) {
                        (Some(rw), _) => text
                            .and_then(rw)
                            .and_then(|t| weir_lang::load_str("rewritten.nft", &t).ok())
                            .map(|(rs, _)| (Model::new(&rs, router.clone()), 0)),
                        (None, Some(fix)) => {
                            Model::with_fix(rs, router.clone(), fix).map(|m| (m, 0))
                        }
                        (None, None) if KNOWN[i].replays => {
                            Some((Model::new(rs, router.clone()), 0))
                        }
                        (None, None) => None,
                    });
                }
                match slot.as_mut().and_then(|m| m.as_mut()) {
                    Some((alt, seen)) => {
                        // the packets before this one (with the variant when it changes
                        // state), then this one from that state: connections, and without
                        // connection tracking still sets, limits and quotas
                        let hv = if KNOWN[i].replays {
                            KNOWN[i].variant
                        } else {
                            Variant::WEIR
                        };
                        for h in cx.history.get(*seen..).unwrap_or(&[]) {
                            if h.skip.is_none() {
                                alt.predict(h, hv, EngineMode::Linear);
                            }
                        }
                        *seen = cx.history.len();
                        let st = alt.save();
                        let r = alt.predict(p, v, EngineMode::Linear);
                        alt.restore(&st);
                        r
                    }
                    None => continue,
                }
            }
        };
        if compare(router, &pred, kv).is_empty() {
            return Some(ids.join("+"));
        }
    }
    None
}

/// What a one-file diff's reproducer holds: its folder (`STEM-SECONDS` under `dir`), the
/// packets that differ, and the notes (the original capture, then each difference).
pub fn repro_parts<'p>(
    dir: &Path,
    stem: &str,
    report: &Report,
    prepared: &'p [Prepared],
    pcap: &Path,
) -> (PathBuf, Vec<&'p Prepared>, Vec<String>) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let different = || {
        report
            .packets
            .iter()
            .filter(|r| r.status == Status::Different)
    };
    let diff = different().map(|r| &prepared[r.number - 1]).collect();
    let mut text: Vec<String> = vec![format!(
        "Packets of the original capture {} (renumbered here from 1):\n",
        pcap.display()
    )];
    text.extend(different().map(|r| r.text()));
    (dir.join(format!("{stem}-{secs}")), diff, text)
}

/// Load and run one ruleset and capture in the lab and compare.
pub fn run_case(
    lab: &mut Lab,
    rs: &ir::Ruleset,
    text: Option<&str>,
    rules_file: &Path,
    prepared: &[Prepared],
) -> Result<Report, Error> {
    lab.load(rules_file).map_err(Error::KernelRefused)?;
    let inj = lab.inject(prepared)?;
    Ok(compare_all(rs, text, lab.router(), prepared, &inj))
}

/// Write a reproducer folder: the ruleset, the packets (as injected), the topology with their
/// input interfaces, and a README with the differences and the command that reruns it.
pub fn write_reproducer(
    dir: &Path,
    rules_text: &str,
    topo: &Topology,
    router: &Router,
    pkts: &[&Prepared],
    notes: &[String],
) -> Result<PathBuf, Error> {
    let io = |e: std::io::Error| Error::System(format!("{}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(io)?;
    std::fs::write(dir.join("rules.nft"), rules_text).map_err(io)?;
    let f = std::fs::File::create(dir.join("packets.pcap")).map_err(io)?;
    let mut w = PcapWriter::new(std::io::BufWriter::new(f), LinkType::Ethernet)
        .map_err(|e| Error::System(format!("packets.pcap: {e}")))?;
    for p in pkts {
        w.write(p.ts_ns, &p.frame)
            .map_err(|e| Error::System(format!("packets.pcap: {e}")))?;
    }
    w.into_inner()
        .map_err(|e| Error::System(format!("packets.pcap: {e}")))?;
    let mut t = topo.clone();
    t.packets = pkts
        .iter()
        .map(|p| crate::topology::PacketIn {
            iif: ifname(router, p.iif).to_string(),
        })
        .collect();
    std::fs::write(dir.join("topology.json"), t.to_json() + "\n").map_err(io)?;
    let mut readme = String::from("# weir lab reproducer\n\nThe kernel (nftables in a network namespace) and weir disagree on this ruleset and capture.\n\n");
    for n in notes {
        readme.push_str(n);
        readme.push('\n');
    }
    readme.push_str("\nRerun (as root, in this folder):\n\n    weir lab diff --rules rules.nft --pcap packets.pcap --topology topology.json\n");
    std::fs::write(dir.join("README.md"), readme).map_err(io)?;
    Ok(dir.to_path_buf())
}
