#!/bin/sh
# Builds what an operator command runs (`npm run tokens`, `audit-log`, `dead-letters`, `backup`,
# `move-to-cluster`): the package and its dependencies, through turbo like every build.
# Quietly: turbo's banner and summary would precede every command's own output, so they are kept
# back and shown (on stderr, with the compiler's errors) only when the build fails.
# Usage: sh scripts/build-quietly.sh <package name>
set -u

cd "$(dirname "$0")/.."

log=$(mktemp "${TMPDIR:-/tmp}/plant-store-build.XXXXXX") || exit 1
if ./node_modules/.bin/turbo run build --output-logs=errors-only --filter="$1..." >"$log" 2>&1; then
  rm -f "$log"
  exit 0
fi
cat "$log" >&2
rm -f "$log"
printf 'error: the build of %s failed (above); nothing was run.\n' "$1" >&2
exit 1
