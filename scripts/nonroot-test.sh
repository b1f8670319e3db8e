#!/usr/bin/env bash
# The test suite as a user without root, as a person's first `cargo test`
# runs it: root-only tests must skip (and be listed at the end), never fail.
# Run it as root (CI does, after the root run): it makes the user if missing
# and gives it a copy of this tree (what git tracks or would track, not
# target/), a copy of this cargo home's registry cache (so it builds
# offline) and, in a private mount namespace that ends with the run, the
# toolchain at a path it can reach (rustup's is under /root, which others
# cannot enter). STALLSCOPE_REQUIRE_ROOT_TESTS is not passed on: here a
# skip is expected. Nothing is left but the user (and TARGET_DIR if given).
# Usage: sudo scripts/nonroot-test.sh [user=stallscope-test] [TARGET_DIR]
#   TARGET_DIR: a cargo target folder to keep between runs (made the user's)
set -euo pipefail
user=${1:-stallscope-test}
keep_target=${2:-}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: it switches to the user $user" >&2; exit 1; }
id -u "$user" >/dev/null 2>&1 || useradd --no-create-home --shell /bin/bash "$user"

sysroot=$(rustc --print sysroot)
cargo_home=${CARGO_HOME:-$HOME/.cargo}
work=$(mktemp -d /tmp/stallscope-nonroot.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src" "$work/home" "$work/toolchain" "$work/cargo"
if git rev-parse --git-dir >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -c 2>/dev/null | tar -x -C "$work/src"
else
  tar --exclude=./target -c . | tar -x -C "$work/src"
fi
[ -d "$cargo_home/registry" ] && cp -r "$cargo_home/registry" "$work/cargo/"
target=$work/target
if [ -n "$keep_target" ]; then
  mkdir -p "$keep_target"
  target=$(cd "$keep_target" && pwd)
  chown -R "$user:" "$target"
fi
chown -R "$user:" "$work"

unshare --mount --propagation private -- bash -c '
  mount --bind "$1" "$2/toolchain"
  cd "$2/src"
  exec runuser -u "$3" -- env -i HOME="$2/home" USER="$3" SHELL=/bin/bash TMPDIR=/tmp \
    PATH="$2/toolchain/bin:/usr/local/bin:/usr/bin:/bin" \
    CARGO_HOME="$2/cargo" CARGO_TARGET_DIR="$4" CARGO_TERM_COLOR=never \
    cargo test --release --no-fail-fast --offline --locked
' _ "$sysroot" "$work" "$user" "$target"
