#!/usr/bin/env node
// Checks that every relative link in the documentation resolves: the file (or folder) exists and,
// for a `#fragment`, the target Markdown file has a heading with that GitHub-style slug. Also checks
// the `runbook:` links of ops/alerts.yml and ops/alerts.test.yml. Plain Node, no dependency.
// Usage: node scripts/check-links.mjs [root]   (exit 1 and one line per broken link)
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const root = resolve(process.argv[2] ?? join(import.meta.dirname, ".."));

/** GitHub's heading slug (github-slugger): lower case, punctuation and symbols dropped, each space a hyphen. */
export const slug = (heading) =>
  heading
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, "")
    .replace(/ /g, "-");

/** Markdown lines outside fenced code blocks, with inline code spans blanked. */
function proseLines(text) {
  const lines = [];
  let fence = null;
  for (const line of text.split("\n")) {
    const opening = /^\s{0,3}(`{3,}|~{3,})/.exec(line);
    if (fence) {
      if (opening && opening[1][0] === fence[0] && opening[1].length >= fence.length) fence = null;
      lines.push("");
    } else if (opening) {
      fence = opening[1];
      lines.push("");
    } else {
      lines.push(line.replace(/(`+)[^`]*?\1/g, (code) => " ".repeat(code.length)));
    }
  }
  return lines;
}

const anchorCache = new Map();
/** The fragments a Markdown file answers to: its headings' slugs (repeats numbered) and explicit ids. */
function anchorsOf(file) {
  let anchors = anchorCache.get(file);
  if (anchors) return anchors;
  anchors = new Set();
  const seen = new Map();
  const text = readFileSync(file, "utf8");
  const raw = text.split("\n");
  proseLines(text).forEach((line, i) => {
    const heading = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      // The heading's own text, code spans included (GitHub slugs their content too).
      const original = /^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/.exec(raw[i])?.[1] ?? heading[1];
      const plain = original.replace(/\[([^\]]*)\]\([^)]*\)/g, "$1").replace(/<[^>]+>/g, "");
      const base = slug(plain);
      const count = seen.get(base) ?? 0;
      seen.set(base, count + 1);
      anchors.add(count === 0 ? base : `${base}-${count}`);
    }
    for (const id of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(id[1]);
  });
  anchorCache.set(file, anchors);
  return anchors;
}

/** `[text](target)`, `![alt](target)`, `<target>` and `[label]: target` in a file's prose. */
function linksOf(file) {
  const links = [];
  proseLines(readFileSync(file, "utf8")).forEach((line, i) => {
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      links.push({ line: i + 1, target: m[1] });
    for (const m of line.matchAll(/<((?:\.\.?\/|#)[^>\s]*)>/g)) links.push({ line: i + 1, target: m[1] });
    const definition = /^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(\s|$)/.exec(line);
    if (definition) links.push({ line: i + 1, target: definition[1] });
  });
  return links;
}

/** Why `target`, linked from `from` (a file), does not resolve; undefined when it does. */
function problem(from, target) {
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto: …: not checked here
  const hash = target.indexOf("#");
  const path = decodeURIComponent(hash === -1 ? target : target.slice(0, hash)).replace(/\?.*$/, "");
  const fragment = hash === -1 ? undefined : decodeURIComponent(target.slice(hash + 1));
  const file = path === "" ? from : path.startsWith("/") ? join(root, path) : resolve(dirname(from), path);
  if (!existsSync(file)) return `no such file: ${relative(root, file)}`;
  if (fragment === undefined || fragment === "") return undefined;
  if (statSync(file).isDirectory() || !file.endsWith(".md")) return `a #fragment on a file that is not Markdown`;
  if (!anchorsOf(file).has(fragment)) return `no heading #${fragment} in ${relative(root, file)}`;
  return undefined;
}

function markdownUnder(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return markdownUnder(path);
    return entry.name.endsWith(".md") ? [path] : [];
  });
}

const files = [join(root, "README.md"), join(root, "BENCHMARKS.md"), ...markdownUnder(join(root, "docs"))].filter(
  (file) => existsSync(file),
);
const broken = [];
let checked = 0;
for (const file of files) {
  for (const { line, target } of linksOf(file)) {
    checked++;
    const why = problem(file, target);
    if (why) broken.push(`${relative(root, file)}:${line}: ${target}: ${why}`);
  }
}
// The alert rules' runbook links, relative to the repository's root.
for (const name of ["ops/alerts.yml", "ops/alerts.test.yml"]) {
  const file = join(root, name);
  if (!existsSync(file)) continue;
  readFileSync(file, "utf8")
    .split("\n")
    .forEach((text, i) => {
      const runbook = /^\s*runbook:\s*"?([^"\s]+)"?\s*$/.exec(text);
      if (!runbook) return;
      checked++;
      const why = problem(join(root, "README.md"), runbook[1]);
      if (why) broken.push(`${name}:${i + 1}: ${runbook[1]}: ${why}`);
    });
}

if (broken.length > 0) {
  console.error(broken.join("\n"));
  console.error(`${broken.length} broken link(s) of ${checked}`);
  process.exit(1);
}
console.log(`links: ${checked} relative links in ${files.length} Markdown files and the alert rules resolve`);
