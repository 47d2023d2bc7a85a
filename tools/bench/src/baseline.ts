/**
 * The bare baseline `npm run bench` compares the service with: `node:http`, `JSON.parse`, one
 * ioredis command, the same responses. No auth, no validation beyond JSON, no outbox: the floor
 * of what any Node service writing to this Redis costs. Run as its own process, like the api.
 *
 *   POST /plants       SET plant-baseline:{id} <body> NX → 200 {name, tag?} or 409
 *   GET /plants/{id}   GET plant-baseline:{id}           → 200 {id, name, tag?} or 404
 *
 * Its store is the api's (REDIS_URL or REDIS_CLUSTER_NODES, through the store's connection
 * builder); on a cluster its keys spread over the slots like the plants' partitions.
 */
import { createServer, type ServerResponse } from "node:http";
import { connect, parseStoreConfig } from "@plant-store/store";

const port = Number(process.env.PORT ?? 0);
const redis = connect(parseStoreConfig(process.env).redis, { name: "bench-baseline" });

const send = (res: ServerResponse, status: number, body: unknown) => {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
};
const fail = (res: ServerResponse, status: number, message: string) => send(res, status, { error: status, message });

const server = createServer((req, res) => {
  if (req.method === "GET" && req.url?.startsWith("/plants/")) {
    redis.get(`plant-baseline:${req.url.slice(8)}`).then(
      (stored) => (stored === null ? fail(res, 404, "no such plant") : send(res, 200, JSON.parse(stored))),
      () => fail(res, 503, "store unavailable"),
    );
    return;
  }
  if (req.method !== "POST" || req.url !== "/plants") return fail(res, 404, "not found");
  const chunks: Buffer[] = [];
  req.on("data", (chunk: Buffer) => chunks.push(chunk));
  req.on("end", () => {
    let plant: { id: number; name: string; tag?: string };
    try {
      plant = JSON.parse(Buffer.concat(chunks).toString("utf8"));
    } catch {
      return fail(res, 400, "not JSON");
    }
    const stored = JSON.stringify(plant);
    redis.set(`plant-baseline:${plant.id}`, stored, "NX").then(
      (result) =>
        result === "OK"
          ? send(res, 200, plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag })
          : fail(res, 409, "taken"),
      () => fail(res, 503, "store unavailable"),
    );
  });
});

server.listen(port, "127.0.0.1", () => {
  const address = server.address();
  console.log(JSON.stringify({ msg: "baseline ready", port: typeof address === "object" ? address?.port : port }));
});
process.once("SIGTERM", () => server.close(() => redis.quit().finally(() => process.exit(0))));
