// freePort asks the OS for a port; one the caller is about to listen on itself is never the answer.
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { freePort } from "../src/index.js";

/** The OS's range for ports picked by `listen(0)`. */
function ephemeralRange(): [number, number] {
  const [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number);
  return [low as number, high as number];
}

const canListenOn = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = createServer().once("error", () => resolve(false));
    server.listen({ port, host: "127.0.0.1", exclusive: true }, () => server.close(() => resolve(true)));
  });

describe("freePort", () => {
  it("never answers a port to avoid, even when nearly every port the OS picks from is one", async () => {
    // One port in 32 is allowed (odd ones: Linux offers those to listen(0)): without the avoid
    // list, about 15 answers in 16 would be wrong.
    const [low, high] = ephemeralRange();
    const allowed = (port: number) => port % 32 === 1;
    const avoid = new Set<number>();
    for (let port = low; port <= high; port++) if (!allowed(port)) avoid.add(port);
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push(await freePort({ avoid }));
    for (const port of answers) {
      expect(allowed(port)).toBe(true);
      expect(await canListenOn(port)).toBe(true);
    }
  });

  it("answers on the host asked for, and fails rather than loop when the host is not this machine's", async () => {
    const port = await freePort({ host: "127.0.0.1" });
    expect(await canListenOn(port)).toBe(true);
    await expect(freePort({ host: "192.0.2.1" })).rejects.toMatchObject({ code: "EADDRNOTAVAIL" });
  });
});
