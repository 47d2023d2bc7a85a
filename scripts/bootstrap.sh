#!/bin/sh
# Makes `npm start` / `npm test` work on a fresh clone: checks Node, installs dependencies when needed.
# POSIX sh; run from anywhere.
set -eu

cd "$(dirname "$0")/.."

say() { printf 'bootstrap: %s\n' "$*"; }
fail() {
  printf 'bootstrap: error: %s\n' "$*" >&2
  exit 1
}

# --- Node version (package.json engines: >=20.19) -------------------------------------------------
command -v node >/dev/null 2>&1 || fail "Node.js is not installed. Install Node.js 20.19 or newer (https://nodejs.org), then re-run."
node_version=$(node -p 'process.versions.node')
node -e '
  const [major, minor] = process.versions.node.split(".").map(Number);
  process.exit(major > 20 || (major === 20 && minor >= 19) ? 0 : 1);
' || fail "Node.js $node_version is too old; this project needs Node.js 20.19 or newer (see https://nodejs.org or use nvm/fnm), then re-run."

# --- Dependencies -----------------------------------------------------------------------------------
# npm writes node_modules/.package-lock.json on every install: when package-lock.json is newer
# (e.g. after a pull), the installed tree may be stale.
reason=""
if [ ! -d node_modules ]; then
  reason="node_modules is missing"
elif [ ! -f node_modules/.package-lock.json ]; then
  reason="node_modules was not installed by npm"
elif [ -n "$(find package-lock.json -newer node_modules/.package-lock.json)" ]; then
  reason="package-lock.json changed since the last install"
fi

if [ -n "$reason" ]; then
  command -v npm >/dev/null 2>&1 || fail "npm is not on the PATH (it ships with Node.js)."
  # npm install honours the lockfile; npm ci would refuse it here, because this registry lacks
  # other platforms' optional biome/turbo binaries that npm ci expects to find listed.
  say "$reason; installing dependencies (npm install)..."
  npm install --no-audit --no-fund || fail "npm install failed (see the output above)."
  say "dependencies installed."
fi
