#!/usr/bin/env node
// Dead-lettered outbox entries: `npm run dead-letters [-- replay|discard [--partition N] [--id ID]]`.
import { userInfo } from "node:os";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  type DeadLetter,
  HELP,
  openLayout,
  outbox,
  parseCommandLine,
  runCommandLine,
  UsageError,
  withOperatorStore,
} from "@plant-store/store";

const USAGE = `Usage: npm run dead-letters [-- <command> [options]]
       node apps/worker/dist/dead-letters.js [<command>] [options]

An outbox entry the relay cannot read (e.g. written by a newer api than the worker) is moved
to its partition's dead-letter stream instead of blocking the outbox. Once a worker that can
read it runs, replay it: it goes back into its outbox as a new entry and is relayed as usual.
An entry no worker will ever read (a poison entry) can be discarded instead: its side work is
then never done, and the partition's audit log records the discard (who, when, the entry).

Commands:
  list      (default) each dead letter: partition, id, outbox id, why, fields
  replay    put dead letters back into their outboxes (all, or those --partition / --id name)
  discard   remove one dead letter for good (needs --partition and --id), with an audit entry

Options:
  --partition N   only partition N
  --id ID         only this dead letter (with --partition)
  --json          list as JSON lines
  -h, --help      this text

Environment: REDIS_URL or REDIS_CLUSTER_NODES (and REDIS_PASSWORD), else the embedded Redis of a
running \`npm start\` (DATA_DIR: its data folder, default ./data).

Exit status: 0 success, 1 failure (Redis unreachable, no dead letter under --id), 2 bad arguments.
`;

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
/** Dead letters read per partition per page. */
const PAGE = 500;

function parseCommand(argv: readonly string[]) {
  const { values, positionals } = parseCommandLine(
    argv,
    { partition: { type: "string" }, id: { type: "string" }, json: { type: "boolean" } },
    { positionals: true },
  );
  const command = positionals[0] ?? "list";
  if (values.help || command === "help") return HELP;
  if (command !== "list" && command !== "replay" && command !== "discard") {
    throw new UsageError(`unknown command "${command}"`);
  }
  if (positionals.length > 1) throw new UsageError(`unexpected argument "${positionals[1]}"`);
  const partition = values.partition === undefined ? undefined : Number(values.partition);
  if (partition !== undefined && !(Number.isInteger(partition) && partition >= 0)) {
    throw new UsageError(`--partition must be a partition number, not "${values.partition}"`);
  }
  if (values.id !== undefined && partition === undefined) throw new UsageError("--id needs --partition");
  if (command === "discard" && values.id === undefined) {
    throw new UsageError("discard needs --partition and --id: it removes one dead letter at a time");
  }
  if (values.id !== undefined && !/^\d+-\d+$/.test(values.id)) {
    throw new UsageError(`--id must be a stream entry id such as 1795370640916-0, not "${values.id}"`);
  }
  return { command, partition, id: values.id, json: values.json ?? false };
}

type Options = Exclude<ReturnType<typeof parseCommand>, typeof HELP>;

/** Who discards, for the audit log: the operating-system user running the command. */
function operator(): string {
  let user: string | undefined;
  try {
    user = userInfo().username;
  } catch {
    user = process.env.USER; // no passwd entry (some containers)
  }
  return `operator:${user || "unknown"}`;
}

async function deadLetters(options: Options, env: NodeJS.ProcessEnv): Promise<number> {
  return withOperatorStore("dead-letters", env, resolve(repoRoot, "data"), async (redis) => {
    const { partitions } = await openLayout(redis, {});
    if (options.partition !== undefined && options.partition >= partitions) {
      process.stderr.write(`error: the store has partitions 0 to ${partitions - 1}\n`);
      return 2;
    }
    const ops = outbox(redis);
    const chosen =
      options.partition === undefined ? Array.from({ length: partitions }, (_, p) => p) : [options.partition];
    if (options.command === "discard") {
      const auditEntryId = await ops.discardDeadLetter(options.partition as number, options.id as string, operator());
      if (auditEntryId === undefined) {
        process.stderr.write(`error: partition ${options.partition} has no dead letter ${options.id}\n`);
        return 1;
      }
      process.stdout.write(
        `Discarded ${options.id} of partition ${options.partition}; recorded in its audit log (${auditEntryId}).\n`,
      );
      return 0;
    }
    if (options.command === "replay" && options.id !== undefined) {
      const entryId = await ops.replayDeadLetter(options.partition as number, options.id);
      if (entryId === undefined) {
        process.stderr.write(`error: partition ${options.partition} has no dead letter ${options.id}\n`);
        return 1;
      }
      process.stdout.write(`Replayed ${options.id} of partition ${options.partition} as outbox entry ${entryId}.\n`);
      return 0;
    }
    let count = 0;
    for (const p of chosen) {
      let after: string | undefined;
      for (;;) {
        const page: DeadLetter[] = await ops.deadLetters(p, PAGE, after);
        for (const letter of page) {
          count++;
          if (options.command === "list") {
            process.stdout.write(
              options.json
                ? `${JSON.stringify(letter)}\n`
                : `partition ${p}  ${letter.deadLetterId}  (outbox ${letter.outboxId})  ${letter.error}\n  ${letter.fields}\n`,
            );
          } else {
            await ops.replayDeadLetter(p, letter.deadLetterId);
          }
        }
        if (page.length < PAGE) break;
        after = page.at(-1)?.deadLetterId;
      }
    }
    if (options.command === "replay") process.stdout.write(`Replayed ${count} dead letter(s) into their outboxes.\n`);
    else if (!options.json) process.stdout.write(`${count} dead letter(s).\n`);
    return 0;
  });
}

function main(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  return runCommandLine(argv, USAGE, parseCommand, (options) => deadLetters(options, env));
}

process.exitCode = await main(process.argv.slice(2), process.env);
