#!/bin/sh
# Makes `npm start` / `npm test` work on a fresh clone, whatever NODE_ENV says: checks Node, and
# installs the locked dependencies (devDependencies included: the build needs them) when the
# installed tree is not known to match the lockfile and patches. POSIX sh; run from anywhere.
set -eu

cd "$(dirname "$0")/.."

say() { printf 'bootstrap: %s\n' "$*"; }
fail() {
  printf 'bootstrap: error: %s\n' "$*" >&2
  exit 1
}

# --- Node version (package.json engines) --------------------------------------------------------
# 20.19+, 22.12+ and 24+: the lines where require(esm) is on by default, which dependencies that
# ship only ES modules need. CI runs the suite on 20, 22 and 24.
command -v node >/dev/null 2>&1 || fail "Node.js is not installed. Install Node.js 24 (or 22.12+, or 20.19+), then re-run."
node_version=$(node -p 'process.versions.node')
node -e '
  const [major, minor] = process.versions.node.split(".").map(Number);
  const ok = major >= 24 || (major === 22 && minor >= 12) || (major === 20 && minor >= 19);
  process.exit(ok ? 0 : 1);
' || fail "Node.js $node_version is not supported; use Node.js 24 (or 22.12+, or 20.19+), then re-run."

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

if [ "$(cat "$stamp" 2>/dev/null || true)" != "$wanted" ]; then
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
