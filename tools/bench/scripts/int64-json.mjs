// How the api's REST answers are written when they hold a bigint (an id beyond 2^53): lossless-json's
// stringify (the path before Node 22) against the native JSON.stringify of bigints as JSON.rawJSON
// values (Node 21+), either by a replacer or in a copy (contracts' withRawBigInts, what the api
// does). Checks the outputs are byte-identical first. holdsBigInt is apps/api/src/http/rest.ts's.
// Usage (after the build): node tools/bench/scripts/int64-json.mjs; ROUNDS=40 for steadier minimums.
import { withRawBigInts } from "@plant-store/contracts";
import { stringify } from "lossless-json";

const ROUNDS = Number(process.env.ROUNDS ?? 15);
const BIG = 2n ** 53n + 1n;
const plant = (id, i) => ({ id, name: `Monstera ${i}`, tag: i % 2 ? "tropical" : undefined });
const page = (big) => ({
  plants: Array.from({ length: 100 }, (_, i) => plant(big && i % 2 ? BIG + BigInt(i) : 1000 + i, i)),
  nextCursor: "eyJpZCI6MTAwMH0",
});
const BODIES = {
  "create answer {name,tag}": { name: "Monstera", tag: "tropical" },
  "plant, safe id": plant(42, 1),
  "plant, id beyond 2^53": plant(BIG, 1),
  "page of 100, safe ids": page(false),
  "page of 100, half beyond 2^53": page(true),
  "error body": { error: 404, message: "No plant has the id 42" },
};

function holdsBigInt(value) {
  if (typeof value === "bigint") return true;
  if (typeof value !== "object" || value === null) return false;
  for (const item of Array.isArray(value) ? value : Object.values(value)) if (holdsBigInt(item)) return true;
  return false;
}
const rawBigInt = (_key, value) => (typeof value === "bigint" ? JSON.rawJSON(value.toString()) : value);

const WAYS = {
  "lossless-json (before)": (body) => (holdsBigInt(body) ? stringify(body) : JSON.stringify(body)),
  "JSON.rawJSON replacer when a bigint is held": (body) =>
    holdsBigInt(body) ? JSON.stringify(body, rawBigInt) : JSON.stringify(body),
  "JSON.rawJSON in a copy when a bigint is held (the api's)": (body) =>
    JSON.stringify(holdsBigInt(body) ? withRawBigInts(body) : body),
  "JSON.rawJSON replacer always": (body) => JSON.stringify(body, rawBigInt),
};

for (const [name, body] of Object.entries(BODIES)) {
  const outputs = new Set(Object.values(WAYS).map((way) => way(body)));
  if (outputs.size !== 1) throw new Error(`${name}: the outputs differ: ${[...outputs].join(" | ")}`);
}

/** The fastest of ROUNDS (15) rounds of >= 20 ms each, in ns per call: the least disturbed by other work on the machine. */
function measure(way, body) {
  let n = 1;
  for (let start = performance.now(); performance.now() - start < 20; n *= 2) for (let i = 0; i < n; i++) way(body);
  const rounds = [];
  for (let round = 0; round < ROUNDS; round++) {
    const start = process.hrtime.bigint();
    for (let i = 0; i < n; i++) way(body);
    rounds.push(Number(process.hrtime.bigint() - start) / n);
  }
  return Math.min(...rounds);
}

console.log(`Node ${process.version}; ns per body (fastest of ${ROUNDS} rounds); outputs byte-identical`);
const names = Object.keys(WAYS);
console.log(["body", ...names].join(" | "));
for (const [name, body] of Object.entries(BODIES)) {
  console.log([name, ...names.map((way) => measure(WAYS[way], body).toFixed(0))].join(" | "));
}
