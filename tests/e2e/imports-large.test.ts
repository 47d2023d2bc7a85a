// A 1,000,000-line upload, streamed by the client, to an api running as its own process (as deployed):
// its resident memory (/proc/<pid>/status VmRSS) stays bounded while it takes a body several times
// larger, since it stores the upload in Redis chunk by chunk and never holds it whole. No worker:
// the upload is the subject here (the import itself is the other files' and the bench's).
import { readFileSync } from "node:fs";
import { IMPORT_MEDIA_TYPE, type Import, importLimits } from "@plant-store/contracts";
import { importKeys } from "@plant-store/store";
import { mainNextTo, type Service, spawnApi, startTestStore, type TestStore, TOKEN } from "@plant-store/testing";
import { afterAll, beforeAll, expect, it } from "vitest";
import { call } from "./stack.js";

const LINES = importLimits.maxLines;
/** Each line's name pads it to ~235 bytes: the body is ~223 MiB, near the 256 MiB limit. */
const PADDING = "x".repeat(200);
/**
 * How much the api's resident memory may grow while it takes the upload: a bound well under the
 * body (which a server holding it whole would exceed), above what garbage waiting for V8's next
 * collection takes (measured: +69 MiB for a 109 MiB body, +88 MiB for 223 MiB).
 */
const RSS_BOUND_MIB = 128;
/** How much it may grow in the upload's second half: it levels off (holding the body, it would grow by ~110 MiB). */
const SECOND_HALF_BOUND_MIB = 56;

let store: TestStore;
let api: Service;
let url: string;
beforeAll(async () => {
  store = await startTestStore("single");
  ({ api, url } = await spawnApi(mainNextTo(import.meta.resolve("@plant-store/api")), store, { tokens: TOKEN }));
});
afterAll(async () => {
  await api?.stop();
  await store?.stop();
});

const rssMiB = (pid: number) => {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match?.[1]) / 1024;
};

/** The upload, generated as it is sent (the test holds no more of it than the api does). */
function lines(): { stream: ReadableStream<Uint8Array>; bytes: () => number; sent: () => number } {
  const encoder = new TextEncoder();
  let next = 0;
  let bytes = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (next >= LINES) return controller.close();
      const batch: string[] = [];
      for (const end = Math.min(LINES, next + 2000); next < end; next++) {
        batch.push(`{"id":${9_600_000_000 + next},"name":"${PADDING}${next}"}\n`);
      }
      const chunk = encoder.encode(batch.join(""));
      bytes += chunk.length;
      controller.enqueue(chunk);
    },
  });
  return { stream, bytes: () => bytes, sent: () => next };
}

it("takes a 1,000,000-line upload (~120 MB) with the api's RSS bounded", { timeout: 240_000 }, async () => {
  const pid = api.pid as number;
  // Warm: a first small upload, so the baseline includes what any upload loads.
  const warm = await call(url, {
    method: "POST",
    path: "/plants/imports",
    body: '{"id":1,"name":"warm"}\n',
    contentType: IMPORT_MEDIA_TYPE,
  });
  expect(warm.status).toBe(202);
  const baseline = rssMiB(pid);
  const body = lines();
  const peaks = [baseline, baseline]; // the peaks of the upload's first and second half
  const sampler = setInterval(() => {
    const half = body.sent() < LINES / 2 ? 0 : 1;
    peaks[half] = Math.max(peaks[half] as number, rssMiB(pid));
  }, 50);
  const started = Date.now();
  let response: Response;
  try {
    response = await fetch(`${url}/plants/imports`, {
      method: "POST",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": IMPORT_MEDIA_TYPE },
      body: body.stream,
      duplex: "half",
    } as RequestInit);
  } finally {
    clearInterval(sampler);
  }
  const seconds = (Date.now() - started) / 1000;
  const text = await response.text();
  expect(response.status, text).toBe(202);
  const { id } = JSON.parse(text) as { id: string };
  const sentMiB = body.bytes() / 1024 / 1024;
  const [firstHalf = 0, secondHalf = 0] = peaks;
  const peak = Math.max(firstHalf, secondHalf);
  console.log(
    `1,000,000-line upload: ${sentMiB.toFixed(0)} MiB in ${seconds.toFixed(1)} s; api RSS ${baseline.toFixed(0)} MiB before, ` +
      `peak ${firstHalf.toFixed(0)} MiB in the first half, ${secondHalf.toFixed(0)} MiB in the second (+${(peak - baseline).toFixed(0)} MiB)`,
  );
  expect(sentMiB).toBeGreaterThan(RSS_BOUND_MIB * 1.5);
  expect(peak - baseline).toBeLessThan(RSS_BOUND_MIB);
  expect(secondHalf - firstHalf).toBeLessThan(SECOND_HALF_BOUND_MIB);

  // Stored whole, in chunks of 1,000 lines, and recorded with every line counted.
  const found = (await call(url, { method: "GET", path: `/plants/imports/${id}` })).json as Import;
  expect(found).toMatchObject({ status: "queued", totalLines: LINES, lines: 0 });
  const redis = await import("@plant-store/store").then(({ connect, parseStoreConfig }) =>
    connect(parseStoreConfig(store.env).redis, { name: "imports-large-test" }),
  );
  try {
    expect(await redis.llen(importKeys(id).chunks)).toBe(LINES / 1000);
    // Cancelled: its chunks go.
    expect((await call(url, { method: "DELETE", path: `/plants/imports/${id}` })).status).toBe(200);
    expect(await redis.exists(importKeys(id).chunks)).toBe(0);
  } finally {
    redis.disconnect();
  }
});
