/**
 * list-pages: the cost of one GET /plants page must not grow with the store size.
 *
 * For each store size: a private Redis populated directly with the API's and the worker's
 * layout, the API as its own process, then N sequential requests per page case after a
 * warm-up. Run `node tools/bench/dist/list-pages.js --help` for the options.
 */
import { parseArgs } from "node:util";
import { idsOf, request } from "./http.js";
import { idOf, isTagged, type Layout, MAX_STORE_SIZE, type Population, populate } from "./populate.js";
import { environment, machineLine, table, writeResult } from "./report.js";
import { runBench, startApiProcess, startStack } from "./stack.js";
import { ms, round, roundSummary, type Summary, summarize } from "./stats.js";

const { values: args } = parseArgs({
  options: {
    sizes: { type: "string", default: "100,10000,1000000" },
    requests: { type: "string", default: "200" },
    warmup: { type: "string", default: "100" },
    limit: { type: "string", default: "100" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`usage: node tools/bench/dist/list-pages.js [--sizes 100,10000,1000000] [--requests 200] [--warmup 100] [--limit 100]
  --sizes     store sizes (plants), comma-separated, each 1..${MAX_STORE_SIZE}; the largest is compared with the others
              (10,000 is there because all its pages are full, like the 1,000,000 store's)
  --requests  measured sequential requests per page case (the cases take turns)
  --warmup    unmeasured requests per case first (JIT, connections), round-robin like the measured ones
  --limit     page size (1..100)`);
  process.exit(0);
}

const positive = (name: string, text: string, max: number) => {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`--${name} must be an integer 1..${max}`);
  return value;
};
const sizes = args.sizes.split(",").map((text) => positive("sizes", text.trim(), MAX_STORE_SIZE));
const requests = positive("requests", args.requests, 100_000);
const warmup = positive("warmup", args.warmup, 100_000);
const limit = positive("limit", args.limit, 100);
const TAG = "bench-tag";
const TAG_EVERY = 10;

interface PageCase {
  name: string;
  path: string;
  /** The seqs the page must hold, in order: checked once, so the timing is of the right answer. */
  seqs: number[];
  expectNext: boolean;
}

/** The page cases of a store: first, middle, last, tag-filtered first and middle. */
function casesOf(layout: Layout): PageCase[] {
  const n = layout.size;
  const range = (from: number, to: number) => Array.from({ length: Math.max(0, to - from + 1) }, (_, i) => from + i);
  const all = range(1, n);
  const tagged = all.filter((seq) => isTagged(layout, seq));
  // The cursor is the seq of the last item of the previous page (confirmed by the API's author);
  // it must be ≥ 1, so on a store of at most one page the last page is the first one.
  const page = (seqs: number[], cursor: number) => {
    const after = seqs.filter((seq) => seq > cursor);
    return { seqs: after.slice(0, limit), expectNext: after.length > limit };
  };
  const query = (tag: boolean, cursor: number) =>
    `/plants?limit=${limit}${tag ? `&tag=${encodeURIComponent(layout.tag)}` : ""}${cursor > 0 ? `&cursor=${cursor}` : ""}`;
  const middle = Math.floor(n / 2);
  const last = Math.max(0, n - limit);
  return [
    { name: "first page", path: query(false, 0), ...page(all, 0) },
    { name: "middle page", path: query(false, middle), ...page(all, middle) },
    { name: "last page", path: query(false, last), ...page(all, last) },
    { name: "tag, first page", path: query(true, 0), ...page(tagged, 0) },
    { name: "tag, middle page", path: query(true, middle), ...page(tagged, middle) },
  ];
}

interface CaseResult {
  name: string;
  path: string;
  items: number;
  latency: Summary;
  warnings: string[];
}

interface StoreResult {
  size: number;
  population: Population;
  cases: CaseResult[];
}

interface PreparedStore {
  size: number;
  population: Population;
  api: { lines(): number; output: string[] };
  pageCases: PageCase[];
  urls: string[];
  checked: { items: number; warnings: string[] }[];
}

/** A private Redis populated with `size` plants, its own API process, and the page cases checked once. */
async function prepareStore(size: number): Promise<PreparedStore> {
  const layout: Layout = { size, tag: TAG, tagEvery: TAG_EVERY };
  // Stopped by runBench at the end (all stores stay up: they are measured together).
  const stack = await startStack({ appendfsync: "no", aof: false });
  process.stdout.write(`store of ${size.toLocaleString("en")} plants: populating… `);
  const population = await populate(stack.redis, layout);
  console.log(
    `${(population.ms / 1000).toFixed(2)} s, Redis used_memory ${(population.usedMemory / 2 ** 20).toFixed(0)} MiB`,
  );
  const api = await startApiProcess(stack);
  const pageCases = casesOf(layout);
  const urls = pageCases.map((pageCase) => `${api.url}${pageCase.path}`);
  const checked: { items: number; warnings: string[] }[] = [];
  for (const [index, pageCase] of pageCases.entries()) checked.push(await check(urls[index] as string, pageCase));
  return { size, population, api, pageCases, urls, checked };
}

/**
 * Every (store, case) pair takes its turn, one request at a time: background noise on the
 * machine (a shared 2-core box) then hits all stores alike instead of whichever ran last.
 */
async function measure(stores: PreparedStore[]): Promise<StoreResult[]> {
  const urls = stores.flatMap((store) => store.urls);
  for (let i = 0; i < warmup; i++) for (const url of urls) await expectOk(url);
  const samples = urls.map((): number[] => []);
  for (let i = 0; i < requests; i++) {
    for (const [index, url] of urls.entries()) samples[index]?.push(await expectOk(url));
  }
  let next = 0;
  return stores.map((store) => {
    const cases = store.pageCases.map((pageCase, index) => ({
      name: pageCase.name,
      path: pageCase.path,
      items: store.checked[index]?.items ?? 0,
      latency: summarize(samples[next++] ?? []),
      warnings: store.checked[index]?.warnings ?? [],
    }));
    if (store.api.lines() > 0) {
      console.log(
        `api (${store.size}) wrote ${store.api.lines()} log lines (warn or worse):\n${store.api.output.join("\n")}`,
      );
    }
    return { size: store.size, population: store.population, cases };
  });
}

/** Checks a case's answer once: a wrong page (or an error page) would be a meaningless timing. */
async function check(url: string, pageCase: PageCase): Promise<{ items: number; warnings: string[] }> {
  const probe = await request(url);
  if (probe.status !== 200) throw new Error(`GET ${pageCase.path} → ${probe.status}: ${probe.text.slice(0, 300)}`);
  const ids = idsOf(probe.text);
  const expected = pageCase.seqs.map(idOf);
  if (ids.join(",") !== expected.join(",")) {
    throw new Error(
      `GET ${pageCase.path} returned ${ids.length} plants [${ids.slice(0, 2)} … ${ids.slice(-1)}], ` +
        `expected ${expected.length} [${expected.slice(0, 2)} … ${expected.slice(-1)}]`,
    );
  }
  const warnings: string[] = [];
  if ((probe.next !== undefined) !== pageCase.expectNext) {
    warnings.push(`${pageCase.expectNext ? "no" : "a"} Link rel="next" (${probe.next ?? "none"})`);
  } else if (probe.next !== undefined) {
    const cursor = new URL(probe.next).searchParams.get("cursor");
    const lastSeq = String(pageCase.seqs[pageCase.seqs.length - 1]);
    if (cursor !== lastSeq) warnings.push(`next cursor ${cursor}, expected the last item's seq ${lastSeq}`);
  }
  return { items: ids.length, warnings };
}

async function expectOk(url: string): Promise<number> {
  const response = await request(url);
  if (response.status !== 200) throw new Error(`GET ${url} → ${response.status}: ${response.text.slice(0, 300)}`);
  return response.ms;
}

await runBench("list-pages", 15 * 60_000, async () => {
  const started = Date.now();
  const before = environment();
  console.log(machineLine());
  const prepared: PreparedStore[] = [];
  for (const size of sizes) prepared.push(await prepareStore(size));
  console.log(`measuring: ${prepared.length * requests * (prepared[0]?.urls.length ?? 0)} requests…`);
  const stores = await measure(prepared);

  const label = (size: number) => size.toLocaleString("en");
  console.log(`\nGET /plants, limit ${limit}: ${requests} sequential requests per case after ${warmup} warm-up (ms)\n`);
  console.log(
    table(
      ["store", "case", "items", "p50", "p90", "p99", "max", "mean"],
      stores.flatMap((store) =>
        store.cases.map((c) => [
          label(store.size),
          c.name,
          String(c.items),
          ms(c.latency.p50),
          ms(c.latency.p90),
          ms(c.latency.p99),
          ms(c.latency.max),
          ms(c.latency.mean),
        ]),
      ),
    ),
  );

  const largest = stores.reduce<StoreResult | undefined>((a, b) => (a && a.size >= b.size ? a : b), undefined);
  const ratios: { case: string; of: number; to: number; p50: number; p99: number; mean: number }[] = [];
  if (largest && stores.length > 1) {
    const others = stores.filter((store) => store !== largest);
    console.log(`\nratio ${label(largest.size)} / smaller store (p50, p99, mean); items per page in brackets\n`);
    const rows = largest.cases.map((c, index) => {
      const row = [c.name];
      for (const other of others) {
        const base = other.cases[index];
        if (!base) continue;
        const ratio = {
          case: c.name,
          of: largest.size,
          to: other.size,
          p50: c.latency.p50 / base.latency.p50,
          p99: c.latency.p99 / base.latency.p99,
          mean: c.latency.mean / base.latency.mean,
        };
        ratios.push(ratio);
        row.push(
          `${ratio.p50.toFixed(2)}x  ${ratio.p99.toFixed(2)}x  ${ratio.mean.toFixed(2)}x  [${c.items}/${base.items}]`,
        );
      }
      return row;
    });
    console.log(table(["case", ...others.map((o) => `vs ${label(o.size)}`)], rows));
  }

  console.log(`\npopulation\n`);
  console.log(
    table(
      ["store", "tagged", "time", "rate", "Redis memory"],
      stores.map((s) => [
        label(s.size),
        label(s.population.tagged),
        `${(s.population.ms / 1000).toFixed(2)} s`,
        `${Math.round(s.size / (s.population.ms / 1000)).toLocaleString("en")}/s`,
        `${(s.population.usedMemory / 2 ** 20).toFixed(0)} MiB`,
      ]),
    ),
  );

  const warnings = stores.flatMap((s) =>
    s.cases.flatMap((c) => c.warnings.map((w) => `${label(s.size)}, ${c.name}: ${w}`)),
  );
  for (const warning of warnings) console.log(`warning: ${warning}`);

  const path = writeResult("list-pages", {
    benchmark: "list-pages",
    startedAt: new Date(started).toISOString(),
    durationS: round((Date.now() - started) / 1000),
    environment: { ...before, loadAverage1mAtEnd: environment().loadAverage1m },
    settings: { sizes, requests, warmup, limit, tag: TAG, tagEvery: TAG_EVERY, redisAof: "off", apiLogLevel: "warn" },
    stores: stores.map((s) => ({
      size: s.size,
      population: { ...s.population, ms: round(s.population.ms) },
      cases: s.cases.map((c) => ({ ...c, latency: roundSummary(c.latency) })),
    })),
    ratios: ratios.map((r) => ({ ...r, p50: round(r.p50), p99: round(r.p99), mean: round(r.mean) })),
    warnings,
  });
  console.log(`\nwritten ${path} (${((Date.now() - started) / 1000).toFixed(1)} s in all)`);
  return true;
});
