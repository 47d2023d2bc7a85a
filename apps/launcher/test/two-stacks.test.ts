// Two `npm start` stacks on one machine, each with its own PORT and DATA_DIR and no metrics port
// given: both serve, each worker with metrics of its own. A metrics port that is taken (by another
// program) never takes a stack down.
import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, redisServerBinary } from "@plant-store/redis-server";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launcherMain, ready, type Stack, servesCreates, startStack, TOKEN } from "./stack.js";

let dir: string;
const stacks: Stack[] = [];
const held: Server[] = [];

beforeAll(() => {
  if (!redisServerBinary()) throw new Error("redis-server is needed for this test");
  dir = mkdtempSync(join(tmpdir(), "plant-store-two-stacks-"));
});

afterAll(async () => {
  for (const stack of stacks) {
    if (stack.child.exitCode === null && stack.child.signalCode === null) {
      stack.child.kill("SIGTERM");
      await stack.exit;
    }
  }
  for (const server of held) server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Another program listening on 127.0.0.1:`port` (e.g. an OpenTelemetry exporter on 9464). */
function hold(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const server = createServer().once("error", reject);
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => resolve(server));
    held.push(server);
  });
}

/** A free PORT whose default worker metrics port (PORT + 6464) is free as well, and held here. */
async function portWithItsMetricsPortTaken(): Promise<{ port: number; taken: number }> {
  for (;;) {
    const port = await freePort();
    if (port + 6464 > 65_535) continue;
    try {
      await hold(port + 6464);
      return { port, taken: port + 6464 };
    } catch {
      // taken already: another try
    }
  }
}

function launch(name: string, port: number, env: Record<string, string> = {}): Stack {
  const stack = startStack([process.execPath, launcherMain], { port, dataDir: join(dir, name), env });
  stacks.push(stack);
  return stack;
}

/** The worker's metrics URL the banner shows. */
const metricsUrlOf = (stack: Stack) => /^ {4}(http:\/\/\S+\/metrics),$/m.exec(stack.output())?.[1];

async function scrape(url: string): Promise<{ status: number; text: string }> {
  const response = await fetch(url, { headers: { authorization: `Bearer ${TOKEN}` } });
  return { status: response.status, text: await response.text() };
}

describe("two stacks on one machine", { timeout: 120_000 }, () => {
  it("both serve creates, each worker with its own metrics port, without WORKER_METRICS_PORT", async () => {
    // The first one's default metrics port is taken by another program: it takes a free one and says which.
    const { port: first, taken } = await portWithItsMetricsPortTaken();
    const a = launch("a", first);
    const b = launch("b", await freePort());
    await Promise.all([ready(a, 60_000), ready(b, 60_000)]);
    await servesCreates(a, 1);
    await servesCreates(b, 2);

    expect(a.output()).toMatch(
      new RegExp(`worker metrics: port ${taken} \\(PORT \\+ 6464\\) is taken; using the free port \\d+`),
    );
    const [urlA, urlB] = [metricsUrlOf(a), metricsUrlOf(b)];
    expect(urlA).toBe(`http://127.0.0.1:${/using the free port (\d+)/.exec(a.output())?.[1]}/metrics`);
    expect(urlB).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    expect(urlA).not.toBe(urlB);
    // The banner shows where each worker really serves its metrics.
    for (const url of [urlA, urlB]) {
      const scraped = await scrape(url as string);
      expect(scraped.status).toBe(200);
      expect(scraped.text).toContain("plant_store_outbox_relayed_events_total");
    }
    for (const stack of [a, b]) {
      expect(stack.output()).not.toMatch(/unexpectedly|crash-looping/);
      stack.child.kill("SIGTERM");
      expect((await stack.exit).code).toBe(0);
    }
  });

  it("a WORKER_METRICS_PORT that is taken leaves the api and the worker serving, with a warning", async () => {
    const taken = await freePort();
    await hold(taken);
    const stack = launch("c", await freePort(), { WORKER_METRICS_PORT: String(taken) });
    await ready(stack, 60_000);
    await servesCreates(stack, 3); // the worker indexes: it runs, without metrics
    expect(stack.output()).toContain(`WORKER_METRICS_PORT ${taken} on 127.0.0.1 is not free (EADDRINUSE)`);
    expect(stack.output()).toMatch(/"level":"warn".*metrics endpoint not started; the worker goes on without it/);
    expect(stack.output()).toContain(`none: its port ${taken} is taken`);
    expect(stack.output()).not.toMatch(/unexpectedly|crash-looping/);
    stack.child.kill("SIGTERM");
    expect((await stack.exit).code).toBe(0);
  });
});
