// The launcher's node processes get the Node flags their service needs, and those tracing needs
// when the environment turns it on (on Node 22: the async context frame). A real child process.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tracingNodeFlags } from "@plant-store/tracing";
import { afterAll, describe, expect, it } from "vitest";
import { startService } from "../src/services.js";

const dir = mkdtempSync(join(tmpdir(), "plant-store-services-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
/** The entry every start runs: it writes the node flags it was started with to $OUT. */
const entry = join(dir, "print-flags.mjs");
writeFileSync(
  entry,
  `import { writeFileSync } from "node:fs"; writeFileSync(process.env.OUT, JSON.stringify(process.execArgv));`,
);
let started = 0;

/** Starts `name` with that entry, and returns the node flags it was started with. */
async function flagsOf(name: string, env: NodeJS.ProcessEnv): Promise<string[]> {
  const out = join(dir, `${name}-${++started}.json`);
  const service = startService(name, entry, { ...env, OUT: out });
  expect((await service.exited).code).toBe(0);
  return JSON.parse(readFileSync(out, "utf8")) as string[];
}

describe("startService", () => {
  const traced = { PATH: process.env.PATH, OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:1" };

  it("starts the api with its heap flags, and a traced process with the flags tracing needs", async () => {
    expect(await flagsOf("api", { PATH: process.env.PATH })).toEqual([
      "--max-semi-space-size=16",
      "--max-old-space-size=1024",
    ]);
    expect(await flagsOf("api", traced)).toEqual([
      "--max-semi-space-size=16",
      "--max-old-space-size=1024",
      ...tracingNodeFlags(traced),
    ]);
    expect(await flagsOf("worker", traced)).toEqual(tracingNodeFlags(traced));
  });
});
