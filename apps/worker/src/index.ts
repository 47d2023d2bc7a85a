export { type LogLevel, loadWorkerConfig, type WorkerConfig, WorkerConfigError } from "./config.js";
export { createLogger, type Logger } from "./logger.js";
export { type RunningWorker, type StartWorkerOptions, startWorker } from "./worker.js";
