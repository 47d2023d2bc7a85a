#!/usr/bin/env node
// The audit log, read back: `npm run audit-log [-- --plant ID] [--actor ID] [--since 24h] …`.
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { PLANT_EVENT_TYPES, PlantIdParam } from "@plant-store/contracts";
import {
  type AuditEntry,
  DEAD_LETTER_DISCARDED,
  HELP,
  openLayout,
  parseCommandLine,
  partitionOf,
  readAuditLog,
  runCommandLine,
  UsageError,
  withOperatorStore,
} from "@plant-store/store";

const USAGE = `Usage: npm run audit-log [-- [options]]
       node apps/worker/dist/audit-log.js [options]

Every create, change and delete in the audit log (kept AUDIT_RETENTION_DAYS, 90 by default),
oldest first: when, what, which plant, by which token (its id) and request; and every dead letter
an operator discarded (npm run dead-letters -- discard).

Options:
  --plant ID      only this plant (reads its partition only)
  --actor ID      only changes made with this token (tok_…, or a configured token's id)
  --type TYPE     only plant.created, plant.updated, plant.deleted or dead-letter.discarded
  --since TIME    only entries recorded at or after TIME: ISO 8601 (2026-11-26T10:00:00Z) or an
                  age (90s, 30m, 24h, 7d)
  --until TIME    only entries recorded at or before TIME (same forms)
  --limit N       at most N entries
  --json          JSON lines: partition, auditEntryId and the entry's fields
  -h, --help      this text

An entry is recorded by the change's own commit (its outbox entry, which the log keeps);
--since and --until select by the store's time of that commit, "at" is the api's.

Environment: REDIS_URL or REDIS_CLUSTER_NODES (and REDIS_PASSWORD), else the embedded Redis of a
running \`npm start\` (DATA_DIR: its data folder, default ./data).

Exit status: 0 success, 1 failure (Redis unreachable), 2 bad arguments.
`;

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

const AGE_UNITS_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A time given as ISO 8601 or as an age before `now` ("30m"), in ms. */
function parseTime(option: string, text: string, now: number): number {
  const age = /^(\d+)([smhd])$/.exec(text);
  if (age) return now - Number(age[1]) * (AGE_UNITS_MS[age[2] as string] as number);
  const ms = /^\d{4}-\d\d-\d\d/.test(text) ? Date.parse(text) : Number.NaN;
  if (Number.isNaN(ms)) throw new UsageError(`${option} must be an ISO 8601 time or an age such as 24h, not "${text}"`);
  return ms;
}

function parseOptions(argv: readonly string[], now: number) {
  const { values } = parseCommandLine(argv, {
    plant: { type: "string" },
    actor: { type: "string" },
    type: { type: "string" },
    since: { type: "string" },
    until: { type: "string" },
    limit: { type: "string" },
    json: { type: "boolean" },
  });
  if (values.help) return HELP;
  let plant: string | undefined;
  if (values.plant !== undefined) {
    const id = PlantIdParam.safeParse(values.plant);
    if (!id.success) throw new UsageError(`--plant must be a plant id (an int64), not "${values.plant}"`);
    plant = String(id.data);
  }
  const types: readonly string[] = [...PLANT_EVENT_TYPES, DEAD_LETTER_DISCARDED];
  if (values.type !== undefined && !types.includes(values.type)) {
    throw new UsageError(`--type must be one of ${types.join(", ")}, not "${values.type}"`);
  }
  const limit = values.limit === undefined ? undefined : Number(values.limit);
  if (limit !== undefined && !(Number.isInteger(limit) && limit > 0)) {
    throw new UsageError(`--limit must be a positive integer, not "${values.limit}"`);
  }
  return {
    plant,
    actor: values.actor,
    type: values.type,
    sinceMs: values.since === undefined ? undefined : parseTime("--since", values.since, now),
    untilMs: values.until === undefined ? undefined : parseTime("--until", values.until, now),
    limit,
    json: values.json ?? false,
  };
}

/** One line per entry: when, what, which plant, by whom; an update's change as before → after. */
function describeEntry({ fields }: AuditEntry): string {
  const quoted = (value: string | undefined) => (value === undefined ? "(none)" : JSON.stringify(value));
  if (fields.type === DEAD_LETTER_DISCARDED) {
    return `${fields.at ?? "?"}  ${fields.type}  plant ${fields.plantId ?? "?"}  by ${fields.actor ?? "?"}  (dead letter ${fields.deadLetterId ?? "?"}, event ${fields.eventId ?? "?"})\n  ${fields.reason ?? ""}`;
  }
  let line = `${fields.at ?? "?"}  ${(fields.type ?? "?").padEnd(13)}  plant ${fields.plantId ?? "?"}  by ${fields.actor ?? "?"}  (request ${fields.requestId ?? "?"})`;
  if (fields.type === "plant.updated") {
    const changes: string[] = [];
    if (fields.previousName !== fields.name)
      changes.push(`name ${quoted(fields.previousName)} → ${quoted(fields.name)}`);
    if (fields.previousTag !== fields.tag) changes.push(`tag ${quoted(fields.previousTag)} → ${quoted(fields.tag)}`);
    if (changes.length > 0) line += `\n  ${changes.join(", ")}`;
  }
  return line;
}

type Options = Exclude<ReturnType<typeof parseOptions>, typeof HELP>;

async function printAuditLog(options: Options, env: NodeJS.ProcessEnv): Promise<number> {
  return withOperatorStore("audit-log", env, resolve(repoRoot, "data"), async (redis) => {
    const { partitions } = await openLayout(redis, {});
    const { plant, actor, type } = options;
    const entries = readAuditLog(redis, {
      // A plant's entries all live in its partition.
      partitions:
        plant === undefined ? Array.from({ length: partitions }, (_, p) => p) : [partitionOf(plant, partitions)],
      fromMs: options.sinceMs,
      toMs: options.untilMs,
      filter: (fields) =>
        (plant === undefined || fields.plantId === plant) &&
        (actor === undefined || fields.actor === actor) &&
        (type === undefined || fields.type === type),
    });
    let count = 0;
    for await (const entry of entries) {
      count++;
      const line = options.json
        ? JSON.stringify({ partition: entry.partition, auditEntryId: entry.auditEntryId, ...entry.fields })
        : describeEntry(entry);
      process.stdout.write(`${line}\n`);
      if (count === options.limit) break;
    }
    if (!options.json) process.stdout.write(`${count} entr${count === 1 ? "y" : "ies"}.\n`);
    return 0;
  });
}

function main(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return runCommandLine(
    argv,
    USAGE,
    (args) => parseOptions(args, Date.now()),
    (options) => printAuditLog(options, env),
  );
}

process.exitCode = await main(process.argv.slice(2), process.env);
