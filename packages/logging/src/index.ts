import { isTracing, traceLogFields } from "@plant-store/tracing";
import { type DestinationStream, type LoggerOptions, type Logger as PinoLogger, pino } from "pino";

/**
 * The options every process builds its pino logger with (the api hands them to Fastify), so api
 * and worker lines read alike side by side: one JSON object per line with `time` as ISO-8601,
 * `level` as its name, `service`, `pid` and `msg`; errors under `err` or `error` with their
 * message and stack. While the process traces, a line written inside a span carries its
 * `trace_id` and `span_id` (no mixin otherwise: the loggers are made after tracing started).
 */
export function loggerOptions(service: string, level: string): LoggerOptions {
  return {
    ...(isTracing() ? { mixin: () => traceLogFields() } : {}),
    level,
    base: { service, pid: process.pid },
    timestamp: pino.stdTimeFunctions.isoTime,
    formatters: { level: (label) => ({ level: label }) },
    serializers: { err: pino.stdSerializers.err, error: pino.stdSerializers.err },
  };
}

export type Logger = PinoLogger;

/**
 * A logger for `service` writing to `destination`. The default is stdout written synchronously:
 * pino's own default buffers, so the last lines before a crash (or a SIGKILL) would be lost.
 */
export function createLogger(service: string, level: string, destination?: DestinationStream): Logger {
  return pino(loggerOptions(service, level), destination ?? pino.destination({ dest: 1, sync: true }));
}
