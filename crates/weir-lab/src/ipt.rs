//! The iptables differential runner (`weir lab diff --iptables`, `--format iptables`): the
//! kernel loads iptables-save / ip6tables-save text with `iptables-restore` /
//! `ip6tables-restore` (whichever backend: nf_tables or legacy x_tables), weir imports the
//! same text with [`weir_lang::iptables::import_iptables`] and runs the nft text in the router
//! model; packets are compared as in the nft campaign ([`crate::diff::compare_all`]: the
//! kernel, weir's compiled classifier and weir's linear reference), with the same known
//! differences.
//!
//! A ruleset that one side refuses and the other accepts is a difference (a load mismatch);
//! one both refuse is counted apart (`refused_both`, a generator problem). Each ruleset with an
//! unexplained difference is minimised (the packet's family alone, then rule by rule) and
//! written as a reproducer folder: `rules.iptables` and/or `rules.ip6tables`, `rules.nft`
//! (weir's import, for reading), `packets.pcap`, `topology.json` and a `README.md` with the
//! command that reruns it.

use crate::diff::{self, compare_all, CampaignOptions, CampaignReport, FileDiff, Report, Status};
use crate::gen::{self, GenCapture, World};
use crate::gen_ipt::{self, GenIpt};
use crate::kernel::{self, IptBackend, Lab};
use crate::model::Prepared;
use crate::rng::Rng;
use crate::topology::{Router, Topology};
use crate::Error;
use std::path::{Path, PathBuf};
use std::time::Instant;
use weir_lang::ir;
use weir_wire::{LinkType, PacketMeta, L3};

/// The iptables campaign's settings: the nft campaign's, and the backend.
#[derive(Clone, Debug, Default)]
pub struct IptCampaignOptions {
    pub campaign: CampaignOptions,
    pub backend: IptBackend,
}

/// What loading a case did on each side.
pub enum Loaded {
    /// Both loaded: weir's ruleset and its nft text.
    Both(ir::Ruleset, String),
    /// Only one side accepts the text (the other side's message): a difference.
    Mismatch(String),
    /// Neither accepts it: (weir's message, the kernel's).
    Neither(String, String),
}

/// Import `v4`/`v6` in weir and load them in the kernel.
pub fn load_case(lab: &Lab, backend: IptBackend, v4: Option<&str>, v6: Option<&str>) -> Loaded {
    let weir =
        gen_ipt::import(v4, v6).and_then(|nft| match weir_lang::load_str("imported.nft", &nft) {
            Ok((rs, _)) => Ok((rs, nft)),
            Err((sm, d)) => Err(format!(
                "weir's import does not check:\n{}",
                weir_lang::diag::render_all(&d, &sm)
            )),
        });
    let kernel = lab.load_iptables(backend, v4, v6);
    match (weir, kernel) {
        (Ok((rs, nft)), Ok(())) => Loaded::Both(rs, nft),
        (Ok(_), Err(k)) => Loaded::Mismatch(format!(
            "the kernel's iptables-restore refuses what weir's importer accepts:\n{k}"
        )),
        (Err(w), Ok(())) => Loaded::Mismatch(format!(
            "weir's importer refuses what the kernel's iptables-restore accepts:\n{w}"
        )),
        (Err(w), Err(k)) => Loaded::Neither(w, k),
    }
}

/// Generated ruleset pair `index` of an iptables campaign and its capture.
pub fn generated(seed: u64, index: usize, packets: usize) -> (World, GenIpt, GenCapture) {
    let w = gen::world();
    // a stream of its own: the nft campaign's ruleset `index` is another draw
    let mut rng = Rng::for_item(seed ^ 0x6970_7461_626c_6573, index as u64);
    let g = gen_ipt::ruleset(&mut rng, &w);
    let cap = gen::capture(&mut rng, &w, packets);
    (w, g, cap)
}

fn texts(g: &GenIpt) -> (Option<String>, Option<String>) {
    let t = |v6: bool| {
        let t = g.table(v6);
        (!t.is_empty()).then(|| t.render())
    };
    (t(false), t(true))
}

/// Write a reproducer folder for iptables text (either family may be absent).
#[allow(clippy::too_many_arguments)]
pub fn write_reproducer(
    dir: &Path,
    v4: Option<&str>,
    v6: Option<&str>,
    nft: &str,
    topo: &Topology,
    router: &Router,
    pkts: &[&Prepared],
    notes: &[String],
    backend: Option<&str>,
) -> Result<PathBuf, Error> {
    let io = |e: std::io::Error| Error::System(format!("{}: {e}", dir.display()));
    diff::write_reproducer(dir, nft, topo, router, pkts, notes)?;
    // an empty v4 file when there is nothing at all, so that the command below runs
    let v4 = match (v4, v6) {
        (None, None) => Some(kernel::EMPTY_FILTER),
        _ => v4,
    };
    if let Some(t) = v4 {
        std::fs::write(dir.join("rules.iptables"), t).map_err(io)?;
    }
    if let Some(t) = v6 {
        std::fs::write(dir.join("rules.ip6tables"), t).map_err(io)?;
    }
    let mut readme = String::from("# weir lab reproducer (iptables)\n\nThe kernel (iptables-restore in a network namespace) and weir (`weir import iptables` of the same text) disagree on this ruleset and capture.\n\n");
    if let Some(b) = backend {
        readme.push_str(&format!("Kernel side: {b}.\n\n"));
    }
    for n in notes {
        readme.push_str(n);
        readme.push('\n');
    }
    readme.push_str("\n`rules.nft` is weir's import of the iptables text (for reading).\n\nRerun (as root, in this folder):\n\n    weir lab diff ");
    readme.push_str(match (v4, v6) {
        (Some(_), Some(_)) => "--format iptables --rules rules.iptables --rules6 rules.ip6tables",
        (None, Some(_)) => "--format ip6tables --rules rules.ip6tables",
        _ => "--format iptables --rules rules.iptables",
    });
    readme.push_str(" --pcap packets.pcap --topology topology.json\n");
    std::fs::write(dir.join("README.md"), readme).map_err(io)?;
    Ok(dir.to_path_buf())
}

/// `weir lab diff --format iptables|ip6tables`: one given file per family and a capture.
pub fn diff_files(
    v4: Option<&Path>,
    v6: Option<&Path>,
    pcap: &Path,
    topology: &Path,
    backend: IptBackend,
    opts: kernel::LabOptions,
    repro_dir: Option<&Path>,
) -> Result<FileDiff, Error> {
    let (topo, router, cap, mut notes) = diff::read_case(pcap, topology)?;
    let read = |p: Option<&Path>| -> Result<Option<String>, Error> {
        p.map(|p| {
            std::fs::read_to_string(p).map_err(|e| Error::Input(format!("{}: {e}", p.display())))
        })
        .transpose()
    };
    let (t4, t6) = (read(v4)?, read(v6)?);
    // weir first: a file weir cannot import is bad input, as in the nft mode
    let name = |p: Option<&Path>| p.map(|p| p.display().to_string()).unwrap_or_default();
    let (n4, n6) = (name(v4), name(v6));
    let nft = gen_ipt::import_named(
        t4.as_deref().map(|t| (n4.as_str(), t)),
        t6.as_deref().map(|t| (n6.as_str(), t)),
    )
    .map_err(Error::Input)?;
    let rs = weir_lang::load_str("imported.nft", &nft)
        .map_err(|(sm, d)| {
            Error::Input(format!(
                "weir's import does not check:\n{}",
                weir_lang::diag::render_all(&d, &sm)
            ))
        })?
        .0;
    if t4.iter().chain(t6.iter()).any(|t| {
        t.lines()
            .any(|l| l.starts_with('*') && l.trim() != "*filter")
    }) {
        notes.push("tables other than filter: the lab replaces only the filter tables between runs (a fresh lab has none)".into());
    }
    let version = kernel::iptables_version(backend);
    if let Some(v) = &version {
        notes.push(format!("kernel side: {v}"));
    }
    let prepared = crate::model::prepare(&router, &cap.packets, &router.packets);
    if let Some(why) = kernel::unavailable_iptables(backend) {
        return Err(Error::Unavailable(why));
    }
    let mut lab = Lab::new(&router, opts)?;
    lab.load_iptables(backend, t4.as_deref(), t6.as_deref())
        .map_err(Error::KernelRefused)?;
    let inj = lab.inject(&prepared)?;
    let report = compare_all(&rs, Some(&nft), lab.router(), &prepared, &inj);
    drop(lab);
    let mut reproducer = None;
    if report.differences() > 0 {
        if let Some(dir) = repro_dir {
            let stem = v4
                .or(v6)
                .and_then(|p| p.file_stem())
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "rules".into());
            let (d, diff, text) = crate::diff::repro_parts(dir, &stem, &report, &prepared, pcap);
            reproducer = Some(write_reproducer(
                &d,
                t4.as_deref(),
                t6.as_deref(),
                &nft,
                &topo,
                &router,
                &diff,
                &text,
                version.as_deref(),
            )?);
        }
    }
    Ok(FileDiff {
        report,
        reproducer,
        notes,
    })
}

/// The iptables campaign: `rulesets` generated iptables/ip6tables pairs, each with its own
/// capture.
pub fn campaign(o: &IptCampaignOptions) -> Result<CampaignReport, Error> {
    let opts = &o.campaign;
    let backend = o.backend;
    if let Some(why) = kernel::unavailable_iptables(backend) {
        return Err(Error::Unavailable(why));
    }
    let t0 = Instant::now();
    let w = gen::world();
    let mut lab = Lab::new(&w.router, opts.lab)?;
    let version = kernel::iptables_version(backend).unwrap_or_else(|| "iptables".into());
    let mut out = CampaignReport {
        seed: opts.seed,
        iptables: Some(version.clone()),
        ..CampaignReport::default()
    };
    for i in 0..opts.rulesets {
        if crate::sys::interrupted() {
            return Err(Error::Interrupted);
        }
        let (_, g, cap) = generated(opts.seed, i, opts.packets);
        let (t4, t6) = texts(&g);
        out.rulesets += 1;
        let repro_dir = opts
            .repro_dir
            .as_ref()
            .map(|d| d.join(format!("iptables-seed{}-ruleset{i}", opts.seed)));
        let (rs, nft) = match load_case(&lab, backend, t4.as_deref(), t6.as_deref()) {
            Loaded::Both(rs, nft) => (rs, nft),
            Loaded::Neither(wm, km) => {
                out.refused_both += 1;
                if out.examples.len() < 10 {
                    out.examples.push(format!(
                        "ruleset {i}: both sides refuse the generated text (a generator problem):\n{wm}\n{km}"
                    ));
                }
                continue;
            }
            Loaded::Mismatch(msg) => {
                let msg = format!("ruleset {i}: {msg}");
                out.differences += 1;
                out.load_mismatches += 1;
                out.rulesets_with_differences.push(i);
                if out.examples.len() < 10 {
                    out.examples.push(msg.clone());
                }
                if let Some(d) = &repro_dir {
                    let nft = gen_ipt::import(t4.as_deref(), t6.as_deref()).unwrap_or_default();
                    out.reproducers.push(write_reproducer(
                        d,
                        t4.as_deref(),
                        t6.as_deref(),
                        &nft,
                        &w.topo,
                        &w.router,
                        &[],
                        &[msg],
                        Some(&version),
                    )?);
                }
                continue;
            }
        };
        let prepared = crate::model::prepare(&w.router, &cap.packets, &cap.iifs);
        let inj = lab.inject(&prepared)?;
        let rep = compare_all(&rs, Some(&nft), &w.router, &prepared, &inj);
        if let Some(first) = out.absorb(i, &rep, "iptables ", opts.seed) {
            if let Some(dir) = &repro_dir {
                let prefix = &prepared[..first.number];
                let (g2, single, used) = if opts.minimize {
                    minimize(&mut lab, backend, &g, prefix)
                } else {
                    (g.clone(), None, prefix.to_vec())
                };
                let rep1 = match &single {
                    Some((r, _)) => r.packets.last().unwrap_or(first),
                    None => first,
                };
                let kept = if used.len() == 1 {
                    "one packet".to_string()
                } else {
                    format!(
                        "the {} packets up to the one that differs (connection state)",
                        used.len()
                    )
                };
                let notes = vec![
                    format!(
                        "iptables campaign seed {}, ruleset {i}; {} of its {} packets differed. Minimised to {kept} and {} of {} rules.\n",
                        opts.seed,
                        rep.differences(),
                        rep.injected(),
                        g2.rule_count(),
                        g.rule_count()
                    ),
                    rep1.text(),
                ];
                let nft2 = single.as_ref().map(|s| s.1.clone()).unwrap_or(nft.clone());
                let pkts: Vec<&Prepared> = used.iter().collect();
                let (a, b) = texts(&g2);
                out.reproducers.push(write_reproducer(
                    dir,
                    a.as_deref(),
                    b.as_deref(),
                    &nft2,
                    &w.topo,
                    &w.router,
                    &pkts,
                    &notes,
                    Some(&version),
                )?);
            }
        }
        if opts.progress && (i + 1) % 10 == 0 {
            eprintln!(
                "weir lab (iptables): {} rulesets, {} packets, {} differences, {} explained ({:.1} s)",
                out.rulesets,
                out.packets,
                out.differences,
                out.explained,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    lab.flush_iptables(backend).map_err(Error::System)?;
    out.seconds = t0.elapsed().as_secs_f64();
    Ok(out)
}

/// Shrink a ruleset pair while packet `p` alone still shows an unexplained difference: the
/// packet's family alone, then rule by rule. Returns the smallest pair found with its
/// one-packet report and nft import (None: the packet alone does not reproduce).
/// Shrink a ruleset pair while the last packet of `prefix` still differs: alone if it does so
/// alone, else after the packets before it (connection state). Returns the smallest pair, its
/// report and nft text (None: it does not reproduce), and the packets used (renumbered).
fn minimize(
    lab: &mut Lab,
    backend: IptBackend,
    g: &GenIpt,
    prefix: &[Prepared],
) -> (GenIpt, Option<(Report, String)>, Vec<Prepared>) {
    let renumber = |v: &[Prepared]| -> Vec<Prepared> {
        v.iter()
            .enumerate()
            .map(|(i, p)| Prepared {
                index: i,
                ..p.clone()
            })
            .collect()
    };
    let last = prefix.len().saturating_sub(1);
    let v6 = PacketMeta::parse(&prefix[last].frame, LinkType::Ethernet).l3 == L3::Ipv6;
    let check = |lab: &mut Lab, g: &GenIpt, pkts: &[Prepared]| -> Option<(Report, String)> {
        let (a, b) = texts(g);
        let Loaded::Both(rs, nft) = load_case(lab, backend, a.as_deref(), b.as_deref()) else {
            return None;
        };
        let inj = lab.inject(pkts).ok()?;
        let rep = compare_all(&rs, Some(&nft), lab.router(), pkts, &inj);
        (rep.packets.last()?.status == Status::Different).then_some((rep, nft))
    };
    let mut pkts = renumber(&prefix[last..]);
    let mut first = check(lab, g, &pkts);
    if first.is_none() && prefix.len() > 1 {
        pkts = renumber(prefix);
        first = check(lab, g, &pkts);
    }
    let Some(mut best_rep) = first else {
        return (g.clone(), None, renumber(prefix));
    };
    let check = |lab: &mut Lab, g: &GenIpt| check(lab, g, &pkts);
    let mut best = g.clone();
    let one = g.only(v6);
    if let Some(r) = check(lab, &one) {
        best = one;
        best_rep = r;
    }
    let mut attempts = 0;
    let mut k = best.rule_count();
    while k > 0 && attempts < 400 {
        k -= 1;
        attempts += 1;
        let cand = best.without_rule(k);
        if let Some(r) = check(lab, &cand) {
            best = cand;
            best_rep = r;
        }
    }
    let pruned = best.prune();
    if pruned != best {
        if let Some(r) = check(lab, &pruned) {
            best = pruned;
            best_rep = r;
        }
    }
    (best, Some(best_rep), pkts)
}
