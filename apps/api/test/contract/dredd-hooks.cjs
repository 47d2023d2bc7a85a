// Dredd hooks for the document's success paths (.ci/dredd runs them against a running service).
// They only authenticate and set up fixtures: a token per request (admin for /admin), the things the
// examples name made to exist (the token, webhook and delivery ids are the service's own, so the
// path takes the one just made), and enough plants or tokens for a second page. Every other value is
// the document's own example, sent as it stands (If-Match has none: no fixed value can match an ETag
// the store makes). Error responses are the property and security suites' business: skipped here.
const { createServer } = require("node:http");
const hooks = require("hooks");

const base = process.env.PLANT_STORE_URL;
const tokens = { plants: process.env.PLANT_STORE_TOKEN, admin: process.env.PLANT_STORE_ADMIN_TOKEN };
const made = {};

/** A webhook receiver that always answers 502, so a delivery ends failed (the service retries once). */
const receiver = createServer((_request, response) => response.writeHead(502).end("Bad Gateway")).listen(
  0,
  "127.0.0.1",
);
hooks.afterAll((_transactions, done) => receiver.close(() => done()));

async function call(method, path, body, token = tokens.plants) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(base + path, { method, headers, body: body && JSON.stringify(body) });
  const text = await response.text();
  return { status: response.status, headers: response.headers, json: text ? JSON.parse(text) : undefined };
}

/** A small bulk import (NDJSON); its id. */
async function upload(text) {
  const response = await fetch(`${base}/plants/imports`, {
    method: "POST",
    headers: { authorization: `Bearer ${tokens.plants}`, "content-type": "application/x-ndjson" },
    body: text,
  });
  return (await response.json()).id;
}

async function until(what, check) {
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; ) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`fixture: ${what} did not happen within 20 s`);
}

/** The path with the example's id of a resource replaced by the one the service gave the fixture. */
const swap = (transaction, pairs) => {
  for (const [example, actual] of pairs) transaction.fullPath = transaction.fullPath.replace(example, actual);
  transaction.request.uri = transaction.fullPath;
};
const pathId = (transaction, at) => transaction.fullPath.split("?")[0].split("/")[at];

/** An import, once it has ended (the examples show a finished one: its start and end times too). */
const finished = (id) =>
  until(`import ${id} to finish`, async () =>
    ["succeeded", "failed"].includes((await call("GET", `/plants/imports/${id}`)).json.status),
  );

const fixtures = {
  async "POST /plants/imports"(transaction) {
    // Dredd sends no body for a media type other than JSON: the document's example, as it stands.
    const document = (await call("GET", "/openapi.json")).json;
    transaction.request.body =
      document.paths["/plants/imports"].post.requestBody.content["application/x-ndjson"].example;
  },
  async "GET /plants"(transaction) {
    const query = new URL(transaction.fullPath, base).searchParams;
    for (let i = 1; i <= 21; i += 1)
      await call("POST", "/plants", { id: 5000 + i, name: `Fern ${i}`, tag: query.get("tag") });
    // The list is the worker's index: wait until it holds a second page.
    await until("a second page of the listing", async () =>
      (await call("GET", transaction.fullPath)).headers.has("link"),
    );
  },
  async "GET /plants/imports"(transaction) {
    // The documented Link needs a next page: two imports at least, pages of one; the first page's
    // import (the example's) has finished.
    for (const name of ["first", "second"]) await upload(`{"id":9007199254741200,"name":"${name}"}\n`);
    await finished(made.import);
    const query = new URL(transaction.fullPath, base).searchParams;
    swap(transaction, [[`limit=${query.get("limit")}`, "limit=1"]]);
  },
  async "GET /plants/imports/{id}"(transaction) {
    await finished(made.import);
    swap(transaction, [[pathId(transaction, 3), made.import]]);
  },
  async "DELETE /plants/imports/{id}"(transaction) {
    // An import that finished cannot be cancelled (409); one cancelled already answers 200 again.
    // Long enough to be cancelled before the worker is through it.
    const lines = Array.from({ length: 20_000 }, (_, i) => `{"id":${7_000_000 + i},"name":"Cancelled ${i}"}`);
    const id = await upload(`${lines.join("\n")}\n`);
    // Cancelled once running, as the example's (which has its start time).
    await until(
      `import ${id} to start`,
      async () => (await call("GET", `/plants/imports/${id}`)).json.status !== "queued",
    );
    await call("DELETE", `/plants/imports/${id}`);
    swap(transaction, [[pathId(transaction, 3), id]]);
  },
  async "GET /admin/tokens"(transaction) {
    // The documented Link needs a next page: tokens shaped like the example's (with an expiry), pages of one.
    for (const name of ["first", "second"])
      await call("POST", "/admin/tokens", { name, scopes: ["plants:read"], expiresInSeconds: 86_400 }, tokens.admin);
    const query = new URL(transaction.fullPath, base).searchParams;
    swap(transaction, [[`limit=${query.get("limit")}`, "limit=1"]]);
  },
  async "DELETE /admin/tokens/{id}"(transaction) {
    swap(transaction, [[pathId(transaction, 3), made.token]]);
  },
  async "GET /admin/webhooks/{id}"(transaction) {
    swap(transaction, [[pathId(transaction, 3), made.webhook]]);
  },
  async "PATCH /admin/webhooks/{id}"(transaction) {
    swap(transaction, [[pathId(transaction, 3), made.webhook]]);
  },
  async "DELETE /admin/webhooks/{id}"(transaction) {
    const other = await call("POST", "/admin/webhooks", { url: "https://hooks.example.com/other" }, tokens.admin);
    swap(transaction, [[pathId(transaction, 3), other.json.id]]);
  },
  async "POST /admin/webhooks/{id}/rotate-secret"(transaction) {
    swap(transaction, [[pathId(transaction, 3), made.webhook]]);
  },
  async "POST /admin/webhooks/{id}/enable"(transaction) {
    swap(transaction, [[pathId(transaction, 3), made.webhook]]);
  },
  async "GET /admin/webhooks/{id}/deliveries"(transaction) {
    // A subscription whose receiver fails, and an event for it: its delivery ends failed.
    const url = `http://127.0.0.1:${receiver.address().port}/plants`;
    made.failing = (await call("POST", "/admin/webhooks", { url }, tokens.admin)).json.id;
    await call("POST", "/plants", { id: 9007199254741100, name: "Strelitzia" });
    const path = `/admin/webhooks/${made.failing}/deliveries`;
    // Every delivery ended: events committed before the subscription (an earlier fixture's import)
    // may still reach it while their side work catches up, and the example shows ended ones.
    await until("every delivery failed", async () => {
      const deliveries = (await call("GET", path, undefined, tokens.admin)).json;
      made.delivery = deliveries.find((d) => d.status === "failed")?.id;
      return made.delivery !== undefined && deliveries.every((d) => d.status === "failed");
    });
    swap(transaction, [[pathId(transaction, 3), made.failing]]);
  },
  async "POST /admin/webhooks/{id}/deliveries/{deliveryId}/replay"(transaction) {
    swap(transaction, [
      [pathId(transaction, 5), made.delivery],
      [pathId(transaction, 3), made.failing],
    ]);
  },
};

const after = {
  "POST /plants/imports": (transaction) => {
    made.import = JSON.parse(transaction.real.body).id;
  },
  "POST /admin/tokens": (transaction) => {
    made.token = JSON.parse(transaction.real.body).id;
  },
  "POST /admin/webhooks": (transaction) => {
    made.webhook = JSON.parse(transaction.real.body).id;
  },
};

/** `METHOD /path/{template}` of a transaction (its name starts with the path template). */
const operation = (transaction) => `${transaction.request.method} ${transaction.name.split(" > ")[0]}`;

hooks.beforeEach((transaction, done) => {
  // A stream never ends by itself: Dredd would wait for it forever (tests/e2e/live-events.test.ts
  // reads it).
  if (!/^2/.test(transaction.expected.statusCode) || operation(transaction) === "GET /plants/events") {
    transaction.skip = true;
    return done();
  }
  // Dredd sends an optional header the document gives no example for (If-Match) with an empty value,
  // which the service refuses as malformed; a client leaves such a header out.
  for (const [name, value] of Object.entries(transaction.request.headers)) {
    if (value === "") delete transaction.request.headers[name];
  }
  const admin = transaction.fullPath.startsWith("/admin/");
  transaction.request.headers.Authorization = `Bearer ${admin ? tokens.admin : tokens.plants}`;
  const fixture = fixtures[operation(transaction)];
  if (!fixture) return done();
  fixture(transaction).then(
    () => done(),
    (error) => {
      transaction.fail = String(error);
      done();
    },
  );
});

hooks.afterEach((transaction, done) => {
  if (!transaction.skip && transaction.real) after[operation(transaction)]?.(transaction);
  done();
});
