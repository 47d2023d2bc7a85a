import { parseReply } from "@plant-store/redis-server";
/** A V8 CPU profile as `node --cpu-prof` writes it (the fields read here). */
export interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string; url: string; lineNumber: number } }[];
  samples: number[];
  timeDeltas: number[];
}

/** Where a frame's code lives: a package, a workspace file, `node:<module>`, or a V8 pseudo-frame. */
export function codeOwner(url: string, functionName: string): string {
  if (url === "") return `(${functionName.replace(/^\(|\)$/g, "") || "native"})`;
  const pkg = /.*node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url); // the innermost node_modules
  if (pkg) return pkg[1] as string;
  if (url.startsWith("node:")) return url.split("/")[0] as string;
  const workspace = /\/((?:apps|packages|tools)\/[^/]+)\/dist\/(.+)$/.exec(url);
  if (workspace) return `${workspace[1]}/${workspace[2]}`;
  return url;
}

export interface ProfileShare {
  name: string;
  /** Share of the busy time (samples not idle), 0..1. */
  share: number;
}

/**
 * The busy time of a profile by owner of the code that ran (self time): which packages and files a
 * process spent its CPU in. Idle samples are left out; garbage collection and the like stay.
 */
export function selfTimeByOwner(profile: CpuProfile): { busyMs: number; owners: ProfileShare[] } {
  const ownerOf = new Map(
    profile.nodes.map((node) => [node.id, codeOwner(node.callFrame.url, node.callFrame.functionName)]),
  );
  const time = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((id, i) => {
    const owner = ownerOf.get(id) ?? "(unknown)";
    if (owner === "(idle)") return;
    const delta = profile.timeDeltas[i] ?? 0;
    busy += delta;
    time.set(owner, (time.get(owner) ?? 0) + delta);
  });
  const owners = [...time]
    .map(([name, us]) => ({ name, share: busy === 0 ? 0 : us / busy }))
    .sort((a, b) => b.share - a.share);
  return { busyMs: busy / 1000, owners };
}

export interface CommandStat {
  command: string;
  calls: number;
  usec: number;
}

/** The rows of `INFO commandstats` (`cmdstat_<name>:calls=…,usec=…,…`). */
export function parseCommandStats(info: string): CommandStat[] {
  const stats: CommandStat[] = [];
  for (const line of info.split(/\r?\n/)) {
    const match = /^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/.exec(line);
    if (match) stats.push({ command: match[1] as string, calls: Number(match[2]), usec: Number(match[3]) });
  }
  return stats;
}

/** A numeric field of `INFO` (`<name>:<number>` on a line of its own); 0 when absent. */
export function infoNumber(info: string, name: string): number {
  return Number(new RegExp(`^${name}:([\\d.]+)`, "m").exec(info)?.[1] ?? 0);
}

/** Command stats of several nodes added up per command, busiest first. */
export function sumCommandStats(perNode: readonly CommandStat[][]): CommandStat[] {
  const total = new Map<string, CommandStat>();
  for (const stat of perNode.flat()) {
    const sum = total.get(stat.command) ?? { command: stat.command, calls: 0, usec: 0 };
    sum.calls += stat.calls;
    sum.usec += stat.usec;
    total.set(stat.command, sum);
  }
  return [...total.values()].sort((a, b) => b.usec - a.usec);
}

/** One kind of write in the AOF: a command on keys of one shape, how often and how many bytes. */
export interface AofShare {
  command: string;
  key: string;
  commands: number;
  bytes: number;
}

/**
 * A key with what varies from key to key of one family generalized, so the family reads as one
 * line: a hash tag becomes `{…}`, a run of 8+ hex digits with a letter among them `X`, a number
 * `N` (`plant:{17}:9007199254740993` → `plant:{…}:N`).
 */
export function keyShape(key: string): string {
  return key
    .replace(/\{[^}]*\}/g, "{…}")
    .replace(/[0-9a-f]{8,}/g, (run) => (/[a-f]/.test(run) ? "X" : run))
    .replace(/\d+/g, "N");
}

/** Commands without a key (a script's writes come wrapped in MULTI … EXEC). */
const KEYLESS = new Set(["multi", "exec", "select"]);

/**
 * What pieces of append-only files hold (one per master), by command and key shape, most bytes
 * first. Each piece must start at a command (an AOF's size after a write is at one); a command cut
 * off at a piece's end is left out.
 */
export function aofComposition(pieces: readonly Buffer[]): AofShare[] {
  const shares = new Map<string, AofShare>();
  for (const aof of pieces) {
    let at = 0;
    while (aof[at] === 0x2a /* "*": an array, one command */) {
      const parsed = parseReply(aof, at);
      if (!parsed) break;
      const [name = "", firstArgument = ""] = parsed.value as string[];
      const command = name.toLowerCase();
      const key = KEYLESS.has(command) ? "" : keyShape(firstArgument);
      const share = shares.get(`${command} ${key}`) ?? { command, key, commands: 0, bytes: 0 };
      share.commands += 1;
      share.bytes += parsed.next - at;
      shares.set(`${command} ${key}`, share);
      at = parsed.next;
    }
  }
  return [...shares.values()].sort((a, b) => b.bytes - a.bytes);
}
