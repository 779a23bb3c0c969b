//! The differential campaign ([`campaign`]): generated rulesets and captures through both
//! sides, totals ([`CampaignReport`]), and reproducers minimised rule by rule.

use super::files::render_diags;
use super::report::{compare_all, run_case, write_reproducer, PacketReport, Report, Status};
use crate::gen::{self, GenRuleset};
use crate::kernel::{Lab, LabOptions};
use crate::model::{prepare, Prepared};
use crate::rng::Rng;
use crate::Error;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct CampaignOptions {
    pub rulesets: usize,
    pub seed: u64,
    /// Packets per ruleset, at most.
    pub packets: usize,
    pub lab: LabOptions,
    /// Where reproducers go (none: not written).
    pub repro_dir: Option<PathBuf>,
    /// Minimise reproducers rule by rule.
    pub minimize: bool,
    /// Progress lines on stderr.
    pub progress: bool,
}

impl Default for CampaignOptions {
    fn default() -> Self {
        CampaignOptions {
            rulesets: 50,
            seed: 1,
            packets: 40,
            lab: LabOptions::default(),
            repro_dir: None,
            minimize: true,
            progress: false,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct CampaignReport {
    pub seed: u64,
    pub rulesets: usize,
    /// Packets injected (through both sides).
    pub packets: usize,
    /// Unexplained differences: packets, plus rulesets one side refused and the other accepted.
    pub differences: usize,
    pub explained: usize,
    pub explained_by: BTreeMap<String, usize>,
    /// What the kernel did with the packets: forwarded, delivered locally, dropped.
    pub kernel_fates: BTreeMap<&'static str, usize>,
    /// Rulesets nft or weir refused while the other accepted (counted in `differences`).
    pub load_mismatches: usize,
    pub rulesets_with_differences: Vec<usize>,
    pub late_frames: usize,
    pub barrier_misses: usize,
    pub seconds: f64,
    pub reproducers: Vec<PathBuf>,
    /// The first differences, in words.
    pub examples: Vec<String>,
    /// iptables campaign: the iptables version and backend (`iptables v1.8.9 (nf_tables)`).
    pub iptables: Option<String>,
    /// iptables campaign: generated rulesets both iptables-restore and weir's importer refused
    /// (a generator problem, not a difference).
    pub refused_both: usize,
}

impl CampaignReport {
    /// Add one ruleset's comparison (ruleset `i`) to the totals; its first difference, if any
    /// (also kept as an example, named with `label`).
    pub fn absorb<'r>(
        &mut self,
        i: usize,
        rep: &'r Report,
        label: &str,
        seed: u64,
    ) -> Option<&'r PacketReport> {
        self.packets += rep.injected();
        self.differences += rep.differences();
        self.explained += rep.explained();
        for p in &rep.packets {
            if let Status::Explained(id) = &p.status {
                *self.explained_by.entry(id.clone()).or_default() += 1;
            }
            if p.kernel_fate != "-" {
                *self.kernel_fates.entry(p.kernel_fate).or_default() += 1;
            }
        }
        self.late_frames += rep.late;
        self.barrier_misses += rep.barrier_misses;
        if rep.differences() == 0 {
            return None;
        }
        self.rulesets_with_differences.push(i);
        let first = rep.packets.iter().find(|p| p.status == Status::Different)?;
        if self.examples.len() < 10 {
            self.examples.push(format!(
                "{label}ruleset {i} (seed {seed}):\n{}",
                first.text()
            ));
        }
        Some(first)
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "rulesets": self.rulesets, "packets": self.packets, "differences": self.differences, "explained": self.explained,
            "seed": self.seed, "explained_by": self.explained_by, "kernel_fates": self.kernel_fates, "load_mismatches": self.load_mismatches,
            "rulesets_with_differences": self.rulesets_with_differences, "late_frames": self.late_frames,
            "barrier_misses": self.barrier_misses, "seconds": (self.seconds * 100.0).round() / 100.0,
            "reproducers": self.reproducers.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        });
        if let Some(i) = &self.iptables {
            v["iptables"] = json!(i);
            v["refused_both"] = json!(self.refused_both);
        }
        v
    }
}

/// Generated ruleset `index` of a campaign and its capture (what `weir lab gen` writes).
pub fn generated(
    seed: u64,
    index: usize,
    packets: usize,
) -> (gen::World, GenRuleset, gen::GenCapture) {
    let w = gen::world();
    let mut rng = Rng::for_item(seed, index as u64);
    let g = gen::ruleset(&mut rng, &w);
    let cap = gen::capture(&mut rng, &w, packets);
    (w, g, cap)
}

/// The differential campaign: `rulesets` generated rulesets, each with its own capture.
pub fn campaign(opts: &CampaignOptions) -> Result<CampaignReport, Error> {
    let t0 = Instant::now();
    let w = gen::world();
    let mut lab = Lab::new(&w.router, opts.lab)?;
    let mut out = CampaignReport {
        seed: opts.seed,
        ..CampaignReport::default()
    };
    let rules_path = lab.scratch().join("rules.nft");
    for i in 0..opts.rulesets {
        if crate::sys::interrupted() {
            return Err(Error::Interrupted);
        }
        let (_, g, cap) = generated(opts.seed, i, opts.packets);
        let text = g.render();
        out.rulesets += 1;
        let repro_dir = opts
            .repro_dir
            .as_ref()
            .map(|d| d.join(format!("seed{}-ruleset{i}", opts.seed)));
        let rs = match weir_lang::load_str(&format!("ruleset-{i}.nft"), &text) {
            Ok((rs, _)) => rs,
            Err((sm, d)) => {
                let msg = format!(
                    "ruleset {i}: weir refuses a generated ruleset:\n{}",
                    render_diags(&sm, &d)
                );
                load_mismatch(&mut out, i, msg, &text, &w, repro_dir.as_deref())?;
                continue;
            }
        };
        std::fs::write(&rules_path, &text)
            .map_err(|e| Error::System(format!("{}: {e}", rules_path.display())))?;
        if let Err(e) = lab.load(&rules_path) {
            let msg = format!("ruleset {i}: nft refuses what weir accepts:\n{e}");
            load_mismatch(&mut out, i, msg, &text, &w, repro_dir.as_deref())?;
            continue;
        }
        let prepared = prepare(&w.router, &cap.packets, &cap.iifs);
        let inj = lab.inject(&prepared)?;
        let rep = compare_all(&rs, Some(&text), &w.router, &prepared, &inj);
        if let Some(first) = out.absorb(i, &rep, "", opts.seed) {
            if let Some(dir) = &repro_dir {
                let prefix = &prepared[..first.number];
                let (g2, single, used) = if opts.minimize {
                    minimize(&mut lab, &g, prefix)
                } else {
                    (g.clone(), None, prefix.to_vec())
                };
                let rep1: &PacketReport = match &single {
                    Some(r) => r.packets.last().unwrap_or(first),
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
                        "Campaign seed {}, ruleset {i} (`weir lab gen --seed {} --index {i}` regenerates the original); {} of its {} packets differed. Minimised to {kept} and {} of {} rules.\n",
                        opts.seed,
                        opts.seed,
                        rep.differences(),
                        rep.injected(),
                        g2.rule_count(),
                        g.rule_count()
                    ),
                    rep1.text(),
                ];
                let pkts: Vec<&Prepared> = used.iter().collect();
                out.reproducers.push(write_reproducer(
                    dir,
                    &g2.render(),
                    &w.topo,
                    &w.router,
                    &pkts,
                    &notes,
                )?);
            }
        }
        if opts.progress && (i + 1) % 10 == 0 {
            eprintln!(
                "weir lab: {} rulesets, {} packets, {} differences, {} explained ({:.1} s)",
                out.rulesets,
                out.packets,
                out.differences,
                out.explained,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    lab.flush().map_err(Error::System)?;
    out.seconds = t0.elapsed().as_secs_f64();
    Ok(out)
}

fn load_mismatch(
    out: &mut CampaignReport,
    i: usize,
    msg: String,
    text: &str,
    w: &gen::World,
    dir: Option<&Path>,
) -> Result<(), Error> {
    out.differences += 1;
    out.load_mismatches += 1;
    out.rulesets_with_differences.push(i);
    if out.examples.len() < 10 {
        out.examples.push(msg.clone());
    }
    if let Some(d) = dir {
        out.reproducers
            .push(write_reproducer(d, text, &w.topo, &w.router, &[], &[msg])?);
    }
    Ok(())
}

/// Shrink a ruleset while the last packet of `prefix` still shows an unexplained difference:
/// alone if it does so alone, else after the packets before it (connection state). Returns the
/// smallest ruleset found, its report (None: it does not reproduce, the original is returned)
/// and the packets used (renumbered from 0).
fn minimize(
    lab: &mut Lab,
    g: &GenRuleset,
    prefix: &[Prepared],
) -> (GenRuleset, Option<Report>, Vec<Prepared>) {
    let path = lab.scratch().join("min.nft");
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
    let check = |lab: &mut Lab, g: &GenRuleset, pkts: &[Prepared]| -> Option<Report> {
        let text = g.render();
        let (rs, _) = weir_lang::load_str("min.nft", &text).ok()?;
        std::fs::write(&path, &text).ok()?;
        let rep = run_case(lab, &rs, Some(&text), &path, pkts).ok()?;
        (rep.packets.last()?.status == Status::Different).then_some(rep)
    };
    let single = renumber(&prefix[last..]);
    let mut pkts = single.clone();
    let mut first = check(lab, g, &pkts);
    if first.is_none() && prefix.len() > 1 {
        pkts = renumber(prefix);
        first = check(lab, g, &pkts);
    }
    let Some(mut best_rep) = first else {
        return (g.clone(), None, renumber(prefix));
    };
    let check = |lab: &mut Lab, g: &GenRuleset| check(lab, g, &pkts);
    let mut best = g.clone();
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
