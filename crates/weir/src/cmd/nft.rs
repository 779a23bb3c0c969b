//! `weir nft`: nft's command line against a running weir (its control socket: `WEIR_SOCKET`,
//! else `/run/weir.sock`). Installed as `nft` (a symlink: `argv[0]` decides), it stands in
//! for the tools that exec `nft`.
//!
//! `-f FILE|-` sends the file as one batch (nft text, or nft's JSON syntax), command words on the line send them as one
//! (both all or nothing, the running ruleset untouched by a refused one); `-c` checks the
//! batch against the running ruleset without applying it; `list ruleset|tables|table|chain|
//! set|map ...` prints the running ruleset as nft lists it (`-j` in nft's JSON, `-s` without
//! counter values, `-n` protocols as numbers, `-a` each rule's handle). Errors go to stderr as weir renders them
//! (`file:line:column`, the line, a caret) and the exit status is 1, as nft's.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

/// What the command line asks for.
#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    file: Option<String>,
    check: bool,
    json: bool,
    stateless: bool,
    numeric: bool,
    handle: bool,
    echo: bool,
    terse: bool,
    /// `-o`: the batch's chains merged by nft's optimizer, what was merged on stderr.
    optimize: bool,
    /// `-i`: commands read from stdin, one line at a time.
    interactive: bool,
    /// `-D NAME=VALUE`: defines given before the batch.
    defines: Vec<(String, String)>,
    /// `-I DIR`: where `include "NAME"` looks.
    include_dirs: Vec<String>,
    words: Vec<String>,
}

const USAGE: &str = "usage: weir nft [ -f FILE | -i | -c | -j | -s | -n | -a | -e | -t | -D NAME=VALUE ] [ COMMANDS ]
  -f, --file FILE   a batch from FILE (- for stdin), applied all or nothing
  -i, --interactive commands from stdin, each line applied on its own
  -c, --check       check the batch against the running ruleset, apply nothing
  -j, --json        list in nft's JSON syntax
  -s, --stateless   list counters without their values
  -n, --numeric     list protocols as numbers
  -a, --handle      list each rule with its handle
  -t, --terse       list sets without their elements
  -D, --define N=V  define $N as V for the batch
  -e, --echo        print what the batch added, with handles
  -I DIR            where include \"NAME\" looks (after ./NAME and before /etc)
  -o, --optimize    merge the batch's rules into sets and maps as nft's optimizer does
  accepted and without effect here: -y, -N, -S, -u, -p, -T, --debug=LEVEL
  the control socket: $WEIR_SOCKET, else /run/weir.sock
";

fn parse(argv: &[String]) -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = argv.iter();
    let define = |a: &mut Args, d: &str| -> Result<(), String> {
        let (k, v) = d
            .split_once('=')
            .ok_or_else(|| format!("-D wants NAME=VALUE, not {d}"))?;
        a.defines.push((k.to_string(), v.to_string()));
        Ok(())
    };
    while let Some(w) = it.next() {
        if !a.words.is_empty() {
            a.words.push(w.clone());
            continue;
        }
        match w.as_str() {
            // the end of the options (`nft -- add chain ... { ... priority -1 ; }`)
            "--" => {
                a.words.extend(it.by_ref().cloned());
                break;
            }
            "-f" | "--file" => {
                a.file = Some(
                    it.next()
                        .ok_or_else(|| "-f needs a file (or -)".to_string())?
                        .clone(),
                )
            }
            "-D" | "--define" => {
                let d = it.next().ok_or_else(|| "-D needs NAME=VALUE".to_string())?;
                define(&mut a, d)?;
            }
            "-I" | "--includepath" => {
                let d = it
                    .next()
                    .ok_or_else(|| "-I needs a directory".to_string())?;
                a.include_dirs.push(d.clone());
            }
            s if s.starts_with("--includepath=") => {
                a.include_dirs.push(s["--includepath=".len()..].to_string())
            }
            s if s.starts_with("--define=") => define(&mut a, &s["--define=".len()..])?,
            s if s.starts_with("--debug") => {}
            "-c" | "--check" => a.check = true,
            "-j" | "--json" => a.json = true,
            "-s" | "--stateless" => a.stateless = true,
            "-n" | "--numeric" => a.numeric = true,
            "-a" | "--handle" => a.handle = true,
            "-e" | "--echo" => a.echo = true,
            "-t" | "--terse" => a.terse = true,
            "-i" | "--interactive" => a.interactive = true,
            "-o" | "--optimize" => a.optimize = true,
            "-y" | "--numeric-priority" | "-N" | "--reversedns" | "-S" | "--service" | "-u"
            | "--guid" | "-p" | "--numeric-protocol" | "-T" | "--numeric-time" => {}
            // nft's short options may be grouped (`-nn`, `-ef FILE`)
            s if s.starts_with('-') && s.len() > 2 && !s.starts_with("--") => {
                for c in s[1..].chars() {
                    match c {
                        'c' => a.check = true,
                        'j' => a.json = true,
                        's' => a.stateless = true,
                        'n' => a.numeric = true,
                        'a' => a.handle = true,
                        'e' => a.echo = true,
                        't' => a.terse = true,
                        'i' => a.interactive = true,
                        'o' => a.optimize = true,
                        'y' | 'N' | 'S' | 'u' | 'p' | 'T' => {}
                        'f' => {
                            a.file = Some(
                                it.next()
                                    .ok_or_else(|| "-f needs a file (or -)".to_string())?
                                    .clone(),
                            )
                        }
                        _ => return Err(format!("unknown option -{c}\n{USAGE}")),
                    }
                }
            }
            s if s.starts_with('-') => return Err(format!("unknown option {s}\n{USAGE}")),
            _ => a.words.push(w.clone()),
        }
    }
    if a.file.is_none() && a.words.is_empty() && !a.interactive {
        return Err(USAGE.into());
    }
    Ok(a)
}

fn socket() -> PathBuf {
    std::env::var_os("WEIR_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/weir.sock"))
}

/// The answer of the running weir: its first line `ok` or `error`, the rest printed.
fn answer(reply: &str) -> (bool, &str) {
    match reply.split_once('\n') {
        Some(("ok", rest)) => (true, rest),
        // `ok +LEN`: LEN bytes for stderr first (what `-o` merged)
        Some((first, rest)) if first.starts_with("ok +") => {
            let n = first[4..].parse::<usize>().unwrap_or(0).min(rest.len());
            let n = (0..=n)
                .rev()
                .find(|i| rest.is_char_boundary(*i))
                .unwrap_or(0);
            eprint!("{}", &rest[..n]);
            (true, &rest[n..])
        }
        Some(("error", rest)) => (false, rest),
        _ => (false, reply),
    }
}

/// `nft monitor [new|destroy] [tables|chains|sets|rules|elements|ruleset|trace]`: the
/// running weir's events as they come (what batches change, the traces of packets marked
/// `meta nftrace set 1`), until interrupted.
fn monitor(a: &Args) -> anyhow::Result<()> {
    use std::io::{BufRead, Write};
    let words: Vec<&str> = a.words[1..].iter().map(String::as_str).collect();
    let trace = words.contains(&"trace");
    let new = words.contains(&"new");
    let destroy = words.contains(&"destroy");
    // the kind of object asked for, as the events name it (`rules` -> `rule`)
    let kind = words.iter().find_map(|w| match *w {
        "tables" | "chains" | "sets" | "rules" | "elements" => Some(w.trim_end_matches('s')),
        _ => None,
    });
    let sock = socket();
    let mut s = std::os::unix::net::UnixStream::connect(&sock).map_err(|e| {
        anyhow::anyhow!("control socket {} (is weir running?): {e}", sock.display())
    })?;
    s.write_all(format!("nft monitor{}\n", if trace { " trace" } else { "" }).as_bytes())?;
    let mut r = std::io::BufReader::new(s);
    let mut first = String::new();
    r.read_line(&mut first)?;
    if first.trim() != "ok" {
        anyhow::bail!("{first}");
    }
    let out = std::io::stdout();
    for line in r.lines() {
        let line = line?;
        let mut w = line.split_whitespace();
        let (verb, what) = (w.next().unwrap_or(""), w.next().unwrap_or(""));
        let is_trace = verb == "trace";
        let keep = if is_trace {
            trace || kind.is_none() && !new && !destroy
        } else {
            !trace
                && (!new || verb == "add")
                && (!destroy || verb == "delete")
                && kind.is_none_or(|k| what == k || (k == "set" && what == "map"))
        };
        if !keep {
            continue;
        }
        // (handles only with -a)
        let line = if a.handle || is_trace {
            line.clone()
        } else {
            line.split(" # handle ").next().unwrap_or(&line).to_string()
        };
        let mut o = out.lock();
        writeln!(o, "{line}")?;
        o.flush()?;
    }
    Ok(())
}

/// `weir nft ARGS...` (or `nft ARGS...` through the symlink).
pub fn main(argv: &[String]) -> ExitCode {
    let a = match parse(argv) {
        Ok(a) => a,
        Err(e) => {
            eprint!("{e}");
            return ExitCode::from(1);
        }
    };
    if a.words.first().is_some_and(|w| w == "monitor") {
        return match monitor(&a) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("Error: {e}");
                ExitCode::from(1)
            }
        };
    }
    match run(&a) {
        Ok((true, out)) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Ok((false, err)) => {
            eprint!("{err}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(a: &Args) -> anyhow::Result<(bool, String)> {
    if a.interactive && a.file.is_none() && a.words.is_empty() {
        // each line a command (or `;`-separated commands) of its own, as nft -i reads them
        let mut t = String::new();
        std::io::stdin().read_to_string(&mut t)?;
        let mut out = String::new();
        // (a `define` holds for the lines after it)
        let mut defines = String::new();
        for line in t.lines().filter(|l| !l.trim().is_empty()) {
            let l = line.trim_start();
            if l.starts_with("define ") || l.starts_with("redefine ") {
                defines.push_str(line);
                defines.push('\n');
                continue;
            }
            let line = format!("{defines}{line}");
            let words: Vec<String> = line.split(' ').map(String::from).collect();
            let one = Args {
                words,
                interactive: false,
                defines: a.defines.clone(),
                ..Args::default()
            };
            let (ok, text) = run(&one)?;
            out.push_str(&text);
            if !ok {
                return Ok((false, out));
            }
        }
        return Ok((true, out));
    }
    let sock = socket();
    if a.file.is_none() && a.words.first().map(String::as_str) == Some("list") {
        let mut flags = vec!["nft", "list"];
        for (on, f) in [
            (a.json, "json"),
            (a.stateless, "stateless"),
            (a.numeric, "numeric"),
            (a.handle, "handle"),
        ] {
            if on {
                flags.push(f);
            }
        }
        let words: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        let reply = weir_dataplane::control::ask(&sock, &words)?;
        let (ok, text) = answer(&reply);
        if !ok {
            return Ok((false, text.to_string()));
        }
        if a.json {
            if !a.terse {
                return Ok((true, text.to_string()));
            }
            // -t: the sets without their elements
            let mut v: serde_json::Value = serde_json::from_str(text)?;
            if let Some(items) = v.get_mut("nftables").and_then(|x| x.as_array_mut()) {
                for it in items {
                    for k in ["set", "map"] {
                        if let Some(o) = it.get_mut(k).and_then(|x| x.as_object_mut()) {
                            o.remove("elem");
                        }
                    }
                }
            }
            return Ok((true, format!("{v}\n")));
        }
        let what: Vec<&str> = a.words[1..].iter().map(String::as_str).collect();
        let what: Vec<&str> = if what.is_empty() {
            vec!["ruleset"]
        } else {
            what
        };
        return Ok(match weir_lang::print::select::select(text, &what) {
            Ok(t) if a.terse => (true, terse(&t)),
            Ok(t) => (true, t),
            Err(e) => (false, format!("Error: {e}\n")),
        });
    }
    let (name, text) = match &a.file {
        Some(f) if f == "-" => {
            let mut t = String::new();
            std::io::stdin().read_to_string(&mut t)?;
            ("/dev/stdin".to_string(), t)
        }
        Some(f) => (
            f.clone(),
            std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("{f}: {e}"))?,
        ),
        // the command line's words: one batch (nft joins them; `;` separates commands)
        None => ("(command line)".to_string(), a.words.join(" ") + "\n"),
    };
    // the batch's includes, read here (the files are the client's: its directory, -I)
    let text = inline_includes(&text, &a.include_dirs, 0).map_err(|e| anyhow::anyhow!(e))?;
    // `-D NAME=VALUE`: nft's defines, before the batch
    let text = a
        .defines
        .iter()
        .map(|(k, v)| format!("define {k} = {v}\n"))
        .collect::<String>()
        + &text;
    let op = if a.check {
        "check"
    } else if a.echo {
        "apply-echo"
    } else {
        "apply"
    };
    // (the name is one word on the request line)
    let mut line = format!("nft {op} {}", name.replace(char::is_whitespace, "_"));
    if a.optimize {
        line.push_str(" optimize");
    }
    let reply = weir_dataplane::control::ask_with_body(&sock, &line, &text)?;
    let (ok, out) = answer(&reply);
    Ok((ok, out.to_string()))
}

/// `include "NAME"` lines replaced by the files they name, as nft finds them: `/ABS`,
/// `./REL` and `../REL` from the current directory, a bare name in each `-I` directory then
/// `/etc`; `*` and `?` in the last part match files (sorted). A file not found stays an
/// include for the running weir to report.
fn inline_includes(text: &str, dirs: &[String], depth: usize) -> Result<String, String> {
    if depth > 16 {
        return Err("include nesting deeper than 16 (an include loop?)".into());
    }
    let mut out = String::new();
    for line in text.split_inclusive('\n') {
        let t = line.trim();
        let path = t
            .strip_prefix("include")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix('"'))
            .and_then(|r| r.split_once('"'))
            .map(|(p, rest)| (p, rest.trim().trim_end_matches(';').trim()));
        let Some((path, "")) = path else {
            out.push_str(line);
            continue;
        };
        let bases: Vec<std::path::PathBuf> = if path.starts_with('/') {
            vec![path.into()]
        } else if path.starts_with("./") || path.starts_with("../") {
            vec![std::env::current_dir()
                .map_err(|e| e.to_string())?
                .join(path)]
        } else {
            dirs.iter()
                .map(|d| std::path::Path::new(d).join(path))
                .chain(std::iter::once(std::path::Path::new("/etc").join(path)))
                .collect()
        };
        let mut found: Option<Vec<std::path::PathBuf>> = None;
        for b in bases {
            let name = b.file_name().map(|n| n.to_string_lossy().to_string());
            let files = match name {
                Some(n) if n.contains(['*', '?']) => {
                    let dir = b.parent().unwrap_or(std::path::Path::new("."));
                    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|e| e.path())
                        .filter(|p| {
                            p.is_file()
                                && p.file_name().is_some_and(|f| {
                                    let f = f.to_string_lossy();
                                    // (a hidden file only when the pattern says the dot)
                                    (!f.starts_with('.') || n.starts_with('.'))
                                        && glob_match(&n, &f)
                                })
                        })
                        .collect();
                    v.sort();
                    // (a glob that matches nothing is no error, as nft's)
                    Some(v)
                }
                _ if b.is_file() => Some(vec![b]),
                _ => None,
            };
            if files.is_some() {
                found = files;
                break;
            }
        }
        match found {
            Some(files) => {
                for f in files {
                    let body =
                        std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
                    out.push_str(&inline_includes(&body, dirs, depth + 1)?);
                    if !body.ends_with('\n') {
                        out.push('\n');
                    }
                }
            }
            None => out.push_str(line),
        }
    }
    Ok(out)
}

/// A shell-style pattern (`*`, `?`) against a file name.
fn glob_match(pat: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pat.as_bytes(), name.as_bytes())
}

/// A listing without set elements (`nft -t`).
fn terse(text: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for l in text.lines() {
        if l.trim_start().starts_with("elements = ") || skipping {
            skipping = !l.ends_with('}');
            continue;
        }
        out.push_str(l);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn the_command_line_as_nft_reads_it() {
        let a = args("-c -f /tmp/x.nft").unwrap();
        assert!(a.check && a.file.as_deref() == Some("/tmp/x.nft"));
        let a = args("-nn -s list ruleset").unwrap();
        assert!(a.numeric && a.stateless && a.words == ["list", "ruleset"]);
        // options after the first command word belong to the command
        let a = args("add rule inet t c meta mark -1").unwrap_or_default();
        assert_eq!(a.words.last().map(String::as_str), Some("-1"));
        assert!(args("-x list ruleset").is_err());
        let a = args("-- add chain inet t c { type filter hook input priority -1 ; }").unwrap();
        assert_eq!(a.words[0], "add");
        assert_eq!(a.words.iter().filter(|w| *w == "-1").count(), 1);
        assert!(args("").is_err());
    }

    #[test]
    fn includes_are_read_where_nft_looks() {
        let d = std::env::temp_dir().join(format!("weir-nft-inc-{}", std::process::id()));
        std::fs::create_dir_all(d.join("inc")).unwrap();
        std::fs::write(d.join("inc/a"), "tcp dport 22 accept\n").unwrap();
        std::fs::write(d.join("inc/b"), "tcp dport 25 accept").unwrap();
        std::fs::write(d.join("one.nft"), "add table x\n").unwrap();
        let dirs = vec![d.display().to_string()];
        let out = inline_includes("chain c {\n include \"inc/*\";\n}\n", &dirs, 0).unwrap();
        assert_eq!(
            out,
            "chain c {\ntcp dport 22 accept\ntcp dport 25 accept\n}\n"
        );
        let out = inline_includes("include \"one.nft\"\n", &dirs, 0).unwrap();
        assert_eq!(out, "add table x\n");
        // not found: left for the running weir to report
        let out = inline_includes("include \"nope\"\n", &dirs, 0).unwrap();
        assert_eq!(out, "include \"nope\"\n");
        assert!(glob_match("*.nft", "a.nft") && !glob_match("*.nft", "a.conf"));
        let _ = std::fs::remove_dir_all(&d);
    }
}
