#!/usr/bin/env python3
"""nftables' shell tests against a running weir (called by tests/lab/nft-shell.sh).

As nft's run-tests.sh: before each test `$NFT flush ruleset`; the test runs with bash, `$NFT`
the nft to test (here a symlink to weir), `$DIFF` diff; its exit status must be 0 (77: the test
skipped itself; the `_N` some names end with is part of the name, as in nft's current runner); then, when the test
ships `dumps/NAME.nft` (and no `dumps/NAME.nodump`), `$NFT list ruleset` must print it: as
text, or (counted apart) equal up to whitespace and the order of set elements.

Which tests: those that are only nft commands against a ruleset. Left out, each counted with
its reason: tests running other programs (`ip`, `unshare`, `socat`...: devices, namespaces,
traffic), tests of the `bridge` and `arp` families (outside weir's scope), tests needing
run-tests.sh's helper library or a tool (socat, tcpdump, vsftpd), and the slow ones nft's
own runner skips by default.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import time

# other programs a test may run: such a test is not only nft commands
EXTERNAL = re.compile(
    r"(^|[;&|(`]\s*|\$\(\s*|then\s+|do\s+|!\s+)"
    r"(ip|ip6?tables(-nft|-save|-restore|-legacy)?|unshare|socat|ping|nc|conntrack|modprobe"
    r"|ebtables|tcpdump|tc|sysctl|nstat|iperf3|ss|python3?|taskset|valgrind|ulimit|mount"
    r"|ethtool|curl|wget|arptables)\b",
    re.M,
)
FAMILY = re.compile(r"\b(bridge|arp)\b")
# features run-tests.sh probes (features/*.nft there) that weir does not have, or tools
TOOLS_FEATURES = {"socat", "tcpdump", "vsftpd", "xtables_xlate"}
LACKING = {"tunnel"}


def tests(root):
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "dumps")
        for f in sorted(files):
            p = os.path.join(d, f)
            # (the tests are the executable files; bogons/ holds their input files)
            if f.startswith("README") or not os.access(p, os.X_OK):
                continue
            yield p


def choose(path):
    """None when the test runs here, else why it is left out."""
    text = open(path, errors="replace").read()
    body = "\n".join(l for l in text.splitlines() if not l.strip().startswith("#"))
    m = EXTERNAL.search(body)
    if m:
        return f"runs `{m.group(2)}` (not only nft commands)"
    if FAMILY.search(body):
        return f"the {FAMILY.search(body).group(1)} family (outside weir's scope)"
    if "NFT_TEST_LIBRARY_FILE" in text or "/helpers/" in text:
        return "needs run-tests.sh's helper files (not shipped)"
    if re.search(r"NFT_TEST_SKIP\(NFT_TEST_SKIP_slow\)", text):
        return "slow (nft's runner skips it by default)"
    for feat in re.findall(r"NFT_TEST_REQUIRES\(NFT_TEST_HAVE_(\w+)\)", text):
        if feat in TOOLS_FEATURES:
            return f"needs {feat}"
    return None


def normalise(text):
    """A listing with its whitespace normalised and the elements of each `{ ... }` sorted:
    nft lists a set's elements in the order of the kernel's set backend (a hash's order for
    hash sets), which says nothing of the ruleset (as weir-lang's nft_conformance test)."""
    pos = 0

    def group():
        nonlocal pos
        items, cur = [], []
        while pos < len(text):
            c = text[pos]
            pos += 1
            if c == "{":
                cur.append(group())
            elif c == "}":
                break
            elif c == ",":
                items.append("".join(cur))
                cur = []
            else:
                cur.append(c)
        items.append("".join(cur))
        items = sorted(" ".join(i.split()) for i in items if i.split())
        return "{ " + ", ".join(items) + " }"

    out = []
    while pos < len(text):
        c = text[pos]
        pos += 1
        out.append(group() if c == "{" else c)
    return " ".join("".join(out).split())


def env_for(args, tmp):
    env = dict(os.environ)
    env.update(
        NFT=args.nft,
        DIFF="diff",
        NFT_TEST_BASEDIR=args.tests,
        NFT_TEST_TESTTMPDIR=tmp,
        NFT_TEST_HAS_SOCKET_LIMITS="n",
        NFT_TEST_SKIP_slow="y",
        NFT_TEST_HAS_REALROOT="y",
        NFT_TEST_HAS_UNSHARED="y",
        NFT_TEST_RANDOM_SEED="0",
    )
    feats = set()
    for p in tests(args.tests):
        feats |= set(re.findall(r"NFT_TEST_HAVE_(\w+)", open(p, errors="replace").read()))
    for f in feats:
        env[f"NFT_TEST_HAVE_{f}"] = "n" if f in TOOLS_FEATURES | LACKING else "y"
    return env


def nft(args, *words, stdin=None):
    return subprocess.run(
        [args.nft, *words],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nft", required=True)
    ap.add_argument("--tests", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--weir-pid", type=int, required=True)
    ap.add_argument("--floor", type=float, default=90.0)
    ap.add_argument("--only")
    ap.add_argument("--timeout", type=int, default=120)
    args = ap.parse_args()
    left_out = collections.Counter()
    passed, failed = [], []
    # passed, their listing equal to the dump only up to whitespace and element order
    reordered = []
    t0 = time.time()
    for path in tests(args.tests):
        name = os.path.relpath(path, args.tests)
        if args.only and not re.search(args.only, name):
            continue
        why = choose(path)
        if why:
            left_out[why] += 1
            continue
        if not alive(args.weir_pid):
            failed.append((name, "weir is not running any more (an earlier test stopped it)"))
            continue
        r = nft(args, "flush", "ruleset")
        if r.returncode != 0:
            failed.append((name, f"flush ruleset before the test failed: {r.stderr.strip()}"))
            continue
        tmp = os.path.join(args.tmp, "t")
        os.makedirs(tmp, exist_ok=True)
        try:
            run = subprocess.run(
                ["bash", path],
                cwd=os.path.dirname(path),
                env=env_for(args, tmp),
                capture_output=True,
                text=True,
                timeout=args.timeout,
            )
            status, out = run.returncode, (run.stdout + run.stderr)
        except subprocess.TimeoutExpired:
            failed.append((name, f"did not end within {args.timeout} s"))
            continue
        if status == 77:
            left_out["skipped itself (exit 77)"] += 1
            continue
        if status != 0:
            last = [l for l in out.strip().splitlines() if l.strip()][-6:]
            failed.append(
                (name, f"exit {status}, expected {0}: " + " | ".join(last))
            )
            continue
        base = os.path.join(os.path.dirname(path), "dumps", os.path.basename(path))
        if os.path.exists(base + ".nft") and not os.path.exists(base + ".nodump"):
            want = open(base + ".nft").read()
            got = nft(args, "list", "ruleset")
            if got.returncode == 0 and got.stdout != want and normalise(got.stdout) == normalise(want):
                reordered.append(name)
            elif got.returncode != 0 or got.stdout != want:
                diff = subprocess.run(
                    ["diff", "-u", base + ".nft", "-"],
                    input=got.stdout + got.stderr,
                    capture_output=True,
                    text=True,
                ).stdout
                lines = [l for l in diff.splitlines()[2:] if l[:1] in "+-"][:8]
                failed.append((name, "listing differs from its dump: " + " | ".join(lines)))
                continue
        passed.append(name)
    chosen = len(passed) + len(failed)
    print(f"left out ({sum(left_out.values())}):")
    for why, n in left_out.most_common():
        print(f"  {n:4} {why}")
    print(f"failed ({len(failed)}):")
    for name, why in failed:
        print(f"  {name}: {why}")
    print(
        f"passed with a listing equal to the dump only up to whitespace and element order "
        f"({len(reordered)}): {' '.join(reordered)}"
    )
    pct = 100.0 * len(passed) / chosen if chosen else 100.0
    print(
        f"nftables shell tests against weir: {len(passed)} of {chosen} passed ({pct:.1f}%), "
        f"{sum(left_out.values())} left out, {time.time() - t0:.0f} s"
    )
    if pct < args.floor:
        print(f"FAIL: below the floor of {args.floor}%")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
