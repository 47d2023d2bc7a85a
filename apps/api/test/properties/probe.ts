import { connect } from "node:net";
import { it } from "vitest";
import { startStack, TOKEN } from "../stack.js";

const raw = (port: number, text: string) =>
  new Promise<string>((resolve) => {
    const socket = connect(port, "127.0.0.1");
    let out = "";
    socket.on("data", (d) => (out += d.toString("latin1")));
    socket.on("close", () => resolve(out));
    socket.on("error", () => resolve(out + "<error>"));
    socket.write(text);
    setTimeout(() => socket.end(), 700);
  });

it("probe", async () => {
  const stack = await startStack({
    env: { AUTH_FAILURES_PER_MINUTE: "100000000", RATE_LIMIT_PER_MINUTE: "100000000" },
  });
  const port = Number(new URL(stack.url).port);
  const body = '{"a":1}';
  const reqs = [
    `HEAD /trpc/plants.get?input=%7B%7D HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
    `HEAD /trpc/nope HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
    `HEAD /trpc/plants.get?batch=1&input=%7B%7D HTTP/1.1\r\nHost: x\r\n\r\n`,
    `HEAD /openapi.json HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    `HEAD /nope HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    `HEAD /admin/queues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
    `HEAD /admin/queues/api/queues HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
    `HEAD /admin/queues/nope HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
    `HEAD /admin/queues/static/x.js HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${TOKEN}\r\n\r\n`,
  ];
  for (const r of reqs) {
    const out = await raw(port, `${r}GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n`);
    console.log(
      `=== ${r.split("\r\n")[0]}\n${out.replace(/\r\n(x-|strict|referrer|cross|content-security|cache|date|connection|keep|ratelimit|vary)[^\r]*/gi, "")}`,
    );
  }
  await stack.stop();
}, 60_000);
