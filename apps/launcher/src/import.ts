// `npm run import -- FILE.ndjson`: uploads an NDJSON file of plants to a running service as a bulk
// import (POST /plants/imports, streamed from disk), then follows the import to its end with a
// progress bar, and prints its counts and first line errors. A client of the REST API like any
// other: it needs the service's URL and a token with plants:write, not the store.
import { createReadStream, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { Readable, Transform } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { createPlantStoreRestClient, type Import, PlantStoreApiError } from "@plant-store/rest-client";
import cliProgress from "cli-progress";
import { repoRoot } from "./config.js";

const USAGE = `Usage: npm run import -- FILE.ndjson [--url URL] [--token TOKEN] [--no-follow]
       npm run import -- --help

Uploads FILE (one NewPlant JSON object per line, e.g. {"id": 1, "name": "Monstera", "tag": "tropical"})
to the service as a bulk import, streamed from disk, then follows the import with a progress bar
until it has succeeded, failed or been cancelled, and prints its counts (created, unchanged,
conflicts, invalid) and its first invalid lines. Interrupting the command (Ctrl+C) stops following,
not the import: it goes on in the service (DELETE /plants/imports/{id} cancels it).

  --url URL       the service (default: PLANT_STORE_URL, else http://127.0.0.1:$PORT, PORT 3000)
  --token TOKEN   a token with the plants:write scope (default: PLANT_STORE_TOKEN, else the first of
                  API_TOKENS, else the one npm start keeps in DATA_DIR/api-token, DATA_DIR ./data)
  --no-follow     upload only: print the import's id and exit
  --help          this text

Limits: 1,000,000 lines or 256 MiB per upload (unless the service sets others); a line is judged as a
POST /plants of it would be. Exit status: 0 the import succeeded, 1 it failed or was cancelled (or
the upload was refused: the service's message is printed), 2 bad arguments.
`;

class UsageError extends Error {}

/** How often the import is read while it runs. */
const POLL_MS = 500;
/** Invalid lines printed at the end (the service keeps the first 100). */
const ERRORS_SHOWN = 10;

function tokenOf(given: string | undefined): string {
  if (given) return given;
  if (process.env.PLANT_STORE_TOKEN) return process.env.PLANT_STORE_TOKEN;
  const configured = process.env.API_TOKENS?.split(",")[0]?.trim();
  if (configured) return configured;
  const file = join(process.env.DATA_DIR ? resolve(process.env.DATA_DIR) : resolve(repoRoot, "data"), "api-token");
  try {
    return readFileSync(file, "utf8").trim();
  } catch {
    throw new UsageError(
      `no token: pass --token, set PLANT_STORE_TOKEN or API_TOKENS, or run npm start first (${file})`,
    );
  }
}

const urlOf = (given: string | undefined) =>
  given ?? process.env.PLANT_STORE_URL ?? `http://127.0.0.1:${process.env.PORT || "3000"}`;

function parse(argv: string[]) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      url: { type: "string" },
      token: { type: "string" },
      "no-follow": { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) return { help: true as const };
  const [file, ...extra] = positionals;
  if (file === undefined) throw new UsageError("name the NDJSON file to import");
  if (extra.length > 0) throw new UsageError(`one file at a time (also got ${extra.join(", ")})`);
  // npm runs the script in the repository; a relative path is the caller's (npm's INIT_CWD).
  const path = resolve(process.env.INIT_CWD ?? process.cwd(), file);
  return { help: false as const, file: path, url: values.url, token: values.token, follow: !values["no-follow"] };
}

/** A bar on stderr; where stderr is no terminal (a log, CI) a line every few seconds instead. */
const newBar = (format: string) =>
  new cliProgress.SingleBar(
    { format, stream: process.stderr, noTTYOutput: true, notTTYSchedule: 2000, hideCursor: true },
    cliProgress.Presets.shades_classic,
  );

const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);

/** The file as a stream of its bytes, counted into the upload bar as they are sent. */
function uploadStream(file: string, size: number) {
  const bar = newBar("upload  [{bar}] {percentage}% | {sent}/{size} MiB");
  bar.start(size, 0, { sent: mib(0), size: mib(size) });
  let sent = 0;
  const counting = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      sent += chunk.length;
      bar.update(sent, { sent: mib(sent) });
      done(null, chunk);
    },
  });
  const counted = createReadStream(file).pipe(counting);
  return { stream: Readable.toWeb(counted) as ReadableStream<Uint8Array>, bar };
}

async function follow(client: ReturnType<typeof createPlantStoreRestClient>, id: string): Promise<Import> {
  let current = await client.imports.get(id);
  const bar = newBar("import  [{bar}] {percentage}% | {value}/{total} lines | {status} | eta {eta_formatted}");
  bar.start(Math.max(current.totalLines, 1), current.lines, { status: current.status });
  let interrupted = false;
  const onInterrupt = () => {
    interrupted = true;
  };
  process.once("SIGINT", onInterrupt);
  try {
    while (["queued", "running"].includes(current.status) && !interrupted) {
      await sleep(POLL_MS);
      current = await client.imports.get(id);
      bar.update(current.lines, { status: current.status });
    }
  } finally {
    bar.stop();
    process.off("SIGINT", onInterrupt);
  }
  if (interrupted) {
    console.log(`Stopped following import ${id}; it goes on in the service (${current.lines} lines so far).`);
  }
  return current;
}

function report(found: Import) {
  console.log(
    `import ${found.id} ${found.status}: ${found.lines} of ${found.totalLines} lines — ` +
      `${found.created} created, ${found.unchanged} unchanged, ${found.conflicts} conflicts, ${found.invalid} invalid`,
  );
  if (found.reason) console.log(`reason: ${found.reason}`);
  for (const error of found.errors.slice(0, ERRORS_SHOWN)) console.log(`  line ${error.line}: ${error.message}`);
  if (found.invalid > ERRORS_SHOWN) {
    const shown = Math.min(ERRORS_SHOWN, found.errors.length);
    console.log(
      `  … ${found.invalid - shown} more invalid line(s) (GET /plants/imports/${found.id} lists the first 100)`,
    );
  }
}

async function main(argv: string[]): Promise<number> {
  let options: ReturnType<typeof parse>;
  try {
    options = parse(argv);
    if (options.help) {
      process.stdout.write(USAGE);
      return 0;
    }
  } catch (error) {
    process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n\n${USAGE}`);
    return 2;
  }
  let size: number;
  let token: string;
  try {
    size = statSync(options.file).size;
    token = tokenOf(options.token);
  } catch (error) {
    const message =
      error instanceof UsageError ? error.message : `cannot read ${options.file}: ${(error as Error).message}`;
    process.stderr.write(`error: ${message}\n`);
    return 2;
  }
  const url = urlOf(options.url);
  const client = createPlantStoreRestClient({ url, token });
  const { stream, bar } = uploadStream(options.file, size);
  let id: string;
  try {
    id = (await client.imports.create(stream)).id;
  } catch (error) {
    bar.stop();
    const message =
      error instanceof PlantStoreApiError
        ? `the service refused the upload: ${error.status} ${error.message}`
        : `could not upload to ${url}: ${error instanceof Error ? (error.cause instanceof Error ? error.cause.message : error.message) : String(error)}`;
    process.stderr.write(`error: ${message}\n`);
    return 1;
  }
  bar.update(size, { sent: mib(size) });
  bar.stop();
  console.log(`uploaded ${options.file} as import ${id} (${url}/plants/imports/${id})`);
  if (!options.follow) return 0;
  const found = await follow(client, id);
  report(found);
  return found.status === "succeeded" ? 0 : found.status === "running" || found.status === "queued" ? 0 : 1;
}

process.exitCode = await main(process.argv.slice(2)).catch((error: unknown) => {
  process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
  return 1;
});
