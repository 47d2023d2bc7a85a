#!/usr/bin/env node
// Token administration: `node packages/tokens/dist/cli.js <command>` (`npm run tokens -- <command>`).
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { NewToken, type TokenRecord, TokenScope } from "@plant-store/contracts";
import { HELP, parseCommandLine, runCommandLine, UsageError, withOperatorStore } from "@plant-store/store";
import { createTokenStore, type TokenStore } from "./store.js";

const USAGE = `Usage: npm run tokens -- <command> [options]
       node packages/tokens/dist/cli.js <command> [options]

Commands:
  create --name <name> --scopes <scopes> [--expires-in <duration>] [--json]
      Issues a token and prints it. It is shown only this once: Redis keeps only its SHA-256.
        --scopes      comma-separated: ${TokenScope.options.join(", ")}
        --expires-in  a number and a unit: s, m (minutes), h, d, w - e.g. 3600s, 12h, 30d.
                      Default: the token does not expire.
        --json        print the created token as JSON
  list [--json]
      Every token, revoked ones included: id, name, scopes, created, expires, last used, revoked.
  revoke <id>
      Revokes a token (within a second on every api instance). Revoked tokens stay listed.

It works on the store's Redis directly, so it needs no admin token (over HTTP the same is
POST, GET and DELETE /admin/tokens, with a token that has the admin scope).

Environment:
  REDIS_URL   redis:// or rediss:// URL of the store's Redis. Unset: the embedded Redis of a
              running \`npm start\` (its address is recorded in <DATA_DIR>/redis/address.json)
  REDIS_CLUSTER_NODES
              the store's Redis Cluster instead: seed nodes, host:port or redis:// URLs, comma-separated
  REDIS_PASSWORD
              password of the Redis (or of every cluster node)
  DATA_DIR    the data folder of that \`npm start\` (default: ./data of this repository)

Exit status: 0 success, 1 failure (e.g. Redis unreachable, unknown id), 2 bad arguments or Redis settings.
`;

/** Repository root: this file runs from packages/tokens/dist/ (the launcher's default data folder is its ./data). */
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400, w: 604_800 };

function parseDuration(text: string): number {
  const match = /^(\d{1,10})([smhdw])$/.exec(text.trim());
  if (!match) throw new UsageError(`--expires-in must be a number and a unit (s, m, h, d, w), e.g. 30d; got "${text}"`);
  return Number(match[1]) * (UNITS[match[2] as string] as number);
}

function parseScopes(text: string) {
  const scopes = text
    .split(",")
    .map((scope) => scope.trim())
    .filter((scope) => scope !== "");
  for (const scope of scopes) {
    if (!TokenScope.safeParse(scope).success) {
      throw new UsageError(`unknown scope "${scope}"; scopes are ${TokenScope.options.join(", ")}`);
    }
  }
  return scopes as TokenScope[];
}

type Command =
  | { kind: "create"; input: NewToken; json: boolean }
  | { kind: "list"; json: boolean }
  | { kind: "revoke"; id: string };

function parseCommand(argv: readonly string[]): Command | typeof HELP {
  const [command, ...rest] = argv;
  if (command === undefined) throw new UsageError("a command is required");
  if (command === "--help" || command === "-h" || command === "help") return HELP;
  switch (command) {
    case "create": {
      const { values } = parseCommandLine(rest, {
        name: { type: "string" },
        scopes: { type: "string" },
        "expires-in": { type: "string" },
        json: { type: "boolean" },
      });
      if (values.help) return HELP;
      if (typeof values.name !== "string") throw new UsageError("create needs --name <name>");
      if (typeof values.scopes !== "string") throw new UsageError("create needs --scopes <scopes>");
      const expires = values["expires-in"];
      const candidate = {
        name: values.name,
        scopes: parseScopes(values.scopes),
        ...(typeof expires === "string" ? { expiresInSeconds: parseDuration(expires) } : {}),
      };
      const parsed = NewToken.safeParse(candidate);
      if (!parsed.success) {
        const message = parsed.error.issues
          .map((issue) =>
            issue.message.replace("expiresInSeconds", "--expires-in").replace("at least 60", "at least 60s (1m)"),
          )
          .join("; ");
        throw new UsageError(message);
      }
      return { kind: "create", input: parsed.data, json: values.json === true };
    }
    case "list": {
      const { values } = parseCommandLine(rest, { json: { type: "boolean" } });
      if (values.help) return HELP;
      return { kind: "list", json: values.json === true };
    }
    case "revoke": {
      const { values, positionals } = parseCommandLine(rest, {}, { positionals: true });
      if (values.help) return HELP;
      if (positionals.length !== 1)
        throw new UsageError("revoke needs exactly one token id, e.g. revoke tok_0123456789ab");
      return { kind: "revoke", id: positionals[0] as string };
    }
    default:
      throw new UsageError(command.startsWith("-") ? `unknown option ${command}` : `unknown command "${command}"`);
  }
}

/** Names are free text: keep one line per token in the table. */
const oneLine = (text: string) => text.replace(/\p{Cc}/gu, " ");

function table(records: readonly TokenRecord[]): string {
  const header = ["ID", "NAME", "SCOPES", "CREATED", "EXPIRES", "LAST USED", "REVOKED"];
  const rows = records.map((record) => [
    record.id,
    oneLine(record.name),
    record.scopes.join(","),
    record.createdAt,
    record.expiresAt ?? "never",
    record.lastUsedAt ?? "-",
    record.revokedAt ?? "-",
  ]);
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column]?.length ?? 0)));
  return [header, ...rows]
    .map((row) =>
      row
        .map((cell, column) => cell.padEnd(widths[column] as number))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}

async function execute(store: TokenStore, command: Command): Promise<number> {
  switch (command.kind) {
    case "create": {
      const created = await store.create(command.input);
      if (command.json) {
        process.stdout.write(`${JSON.stringify(created, null, 2)}\n`);
        return 0;
      }
      process.stdout.write(
        [
          "Token created. Copy it now: it is shown only this once and cannot be recovered.",
          "",
          `    ${created.token}`,
          "",
          `id:       ${created.id}`,
          `name:     ${oneLine(created.name)}`,
          `scopes:   ${created.scopes.join(", ")}`,
          `created:  ${created.createdAt}`,
          `expires:  ${created.expiresAt ?? "never"}`,
          "",
          `Revoke it with: npm run tokens -- revoke ${created.id}`,
          "",
        ].join("\n"),
      );
      return 0;
    }
    case "list": {
      const records = await store.list();
      if (command.json) process.stdout.write(`${JSON.stringify(records, null, 2)}\n`);
      else if (records.length === 0) process.stdout.write("No tokens.\n");
      else process.stdout.write(`${table(records)}\n`);
      return 0;
    }
    case "revoke": {
      const before = await store.get(command.id);
      if (!before) {
        process.stderr.write(`error: no token with id "${oneLine(command.id)}" (see: list)\n`);
        return 1;
      }
      if (before.revokedAt) {
        process.stdout.write(`${before.id} (${oneLine(before.name)}) was already revoked at ${before.revokedAt}\n`);
        return 0;
      }
      await store.revoke(command.id);
      const after = await store.get(command.id);
      process.stdout.write(
        `Revoked ${before.id} (${oneLine(before.name)}) at ${after?.revokedAt}. ` +
          "Every api instance refuses it within a second.\n",
      );
      return 0;
    }
  }
}

function main(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  return runCommandLine(argv, USAGE, parseCommand, (command) =>
    withOperatorStore("tokens", env, resolve(repoRoot, "data"), (redis) => execute(createTokenStore(redis), command)),
  );
}

process.exitCode = await main(process.argv.slice(2), process.env);
