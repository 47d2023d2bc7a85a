import { createLogger as createPinoLogger } from "@plant-store/logging";
import type { LogLevel } from "./config.js";

export type LogFields = Record<string, unknown>;

/** The worker's logging calls: a message, then the fields of the line. */
export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

/**
 * JSON lines on stdout in the format every process shares (@plant-store/logging: pino, ISO time,
 * level names, `service: "worker"`). `write` receives each line instead (tests).
 */
export function createLogger(level: LogLevel, write?: (line: string) => void): Logger {
  const destination = write ? { write: (line: string) => write(line.trimEnd()) } : undefined;
  const pino = createPinoLogger("worker", level, destination);
  return {
    debug: (message, fields) => pino.debug(fields ?? {}, message),
    info: (message, fields) => pino.info(fields ?? {}, message),
    warn: (message, fields) => pino.warn(fields ?? {}, message),
    error: (message, fields) => pino.error(fields ?? {}, message),
  };
}

export const silentLogger: Logger = createLogger("silent");
