import type { LogLevel } from "./config.js";

export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

const severity: Record<LogLevel, number> = {
  debug: 10,
  info: 20,
  warn: 30,
  error: 40,
  silent: Number.POSITIVE_INFINITY,
};

/** Errors do not survive JSON.stringify (their own properties are not enumerable). */
function toJsonValue(value: unknown): unknown {
  if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
  if (typeof value === "bigint") return value.toString();
  return value;
}

/**
 * One JSON object per line on stdout: a log collector can parse it and no logging dependency
 * is needed. `write` is injectable so tests can capture lines.
 */
export function createLogger(
  level: LogLevel,
  base: LogFields = { service: "worker" },
  write: (line: string) => void = (line) => process.stdout.write(`${line}\n`),
): Logger {
  const log = (lineLevel: Exclude<LogLevel, "silent">, message: string, fields: LogFields = {}) => {
    if (severity[lineLevel] < severity[level]) return;
    const record: LogFields = { time: new Date().toISOString(), level: lineLevel, msg: message, ...base };
    for (const [key, value] of Object.entries(fields)) record[key] = toJsonValue(value);
    write(JSON.stringify(record));
  };
  return {
    debug: (message, fields) => log("debug", message, fields),
    info: (message, fields) => log("info", message, fields),
    warn: (message, fields) => log("warn", message, fields),
    error: (message, fields) => log("error", message, fields),
  };
}

export const silentLogger: Logger = createLogger("silent");
