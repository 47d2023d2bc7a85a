import { readdirSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { RedisClient } from "./client.js";

/**
 * Every Lua script of the store lives in `packages/store/lua/`, one file per script, named
 * `<command>-<number of keys>.lua` (as BullMQ's own `src/commands/` are): the name says which
 * command it defines and how many of its arguments are keys, so every key a script touches is
 * declared and a cluster can route it (`-n`: as many keys as the call's first argument says).
 * What several scripts share (the partition clock, a plant's outbox entry) is a fragment in
 * `lua/includes/`, pulled in where a script says `--- @include "<name>"` (BullMQ's own notation),
 * each once. `defineScripts` defines them all on a client (EVALSHA, with EVAL when the server does not have
 * the script yet); nothing else writes Lua.
 */
const LUA_DIR = fileURLToPath(new URL("../lua/", import.meta.url));

export interface ScriptFile {
  command: string;
  /** Undefined for `-n` scripts: the call passes the key count first. */
  numberOfKeys: number | undefined;
  lua: string;
}

let cached: ScriptFile[] | undefined;

/** The scripts in `lua/`, read once. */
export function scriptFiles(): ScriptFile[] {
  cached ??= readdirSync(LUA_DIR)
    .filter((file) => file.endsWith(".lua"))
    .sort()
    .map((file) => {
      const match = /^([a-zA-Z]+)-(\d+|n)\.lua$/.exec(file);
      if (!match) throw new Error(`store script ${file} must be named <command>-<number of keys | n>.lua`);
      return {
        command: match[1] as string,
        numberOfKeys: match[2] === "n" ? undefined : Number(match[2]),
        lua: withIncludes(readFileSync(`${LUA_DIR}${file}`, "utf8"), file),
      };
    });
  return cached;
}

const INCLUDE = /^--- @include "([a-zA-Z]+)"$/gm;

/** A script's text with each `--- @include "<name>"` line replaced by `lua/includes/<name>.lua` (once each, nested too). */
function withIncludes(lua: string, file: string, included = new Set<string>()): string {
  return lua.replace(INCLUDE, (_line, name: string) => {
    if (included.has(name)) return "";
    included.add(name);
    const path = `${LUA_DIR}includes/${name}.lua`;
    let fragment: string;
    try {
      fragment = readFileSync(path, "utf8");
    } catch {
      throw new Error(`store script ${file} includes "${name}", which is not in lua/includes/`);
    }
    return withIncludes(fragment, file, included).trimEnd();
  });
}

/** The commands of the `-n` scripts, whose first argument is their key count, not a key. */
export const keyCountFirstScripts = (): string[] =>
  scriptFiles()
    .filter((script) => script.numberOfKeys === undefined)
    .map((script) => script.command);

const defined = new WeakSet<object>();

/** Defines every store script as a command of `client` (idempotent). */
export function defineScripts<T extends RedisClient>(client: T): T {
  if (defined.has(client)) return client;
  for (const script of scriptFiles()) {
    client.defineCommand(
      script.command,
      script.numberOfKeys === undefined ? { lua: script.lua } : { numberOfKeys: script.numberOfKeys, lua: script.lua },
    );
  }
  defined.add(client);
  return client;
}
