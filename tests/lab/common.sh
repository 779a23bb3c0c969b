# Shared by the `weir run` lab scripts (sourced): the weir binary, tool checks, a scratch
# folder, cleanup of namespaces and of weir, and `fail`.
#
# Before sourcing: NAMESPACES (the names the script creates), TOOLS (commands it needs),
# PREFIX (of the scratch folder). After: WEIR, DIR, WPID (set it when weir runs), fail.
WEIR=${1:-target/release/weir}
WEIR=$(readlink -f "$WEIR")
for t in $TOOLS; do
  command -v $t >/dev/null || { echo "SKIP: $t is not installed"; exit 0; }
done
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (network namespaces)"; exit 0; }
DIR=$(mktemp -d /tmp/$PREFIX.XXXXXX)
WPID=
cleanup() {
  [ -n "$WPID" ] && kill "$WPID" 2>/dev/null && wait "$WPID" 2>/dev/null || true
  for n in $NAMESPACES; do ip netns del $n 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$DIR/weir.log" ] && sed 's/^/  weir: /' "$DIR/weir.log"; exit 1; }
for n in $NAMESPACES; do ip netns del $n 2>/dev/null || true; ip netns add $n; ip -n $n link set lo up; done
