/**
 * `npm run bench:span-cost`: what one kept span costs by itself (issue 55's floor at 100 %). The
 * service's own step helper (`inSpan` of @plant-store/tracing) with the service's SDK set-up
 * (`startTracing`: batched OTLP/HTTP protobuf export, here to a sink of the bench's that answers
 * 200), in this process: rounds of N steps each made a kept span, beside rounds of the same steps
 * made without one, both paced at `--rate` steps a second so that the exporter keeps up (a queue
 * that overflows drops spans, and would make them look cheap). A span's cost is the process's CPU
 * (every thread: the export's serialization and socket writes included) per step, traced minus
 * plain. No Fastify, Redis or instrumentation: a bare span, the least a kept span can cost.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import { inSpan, startTracing } from "@plant-store/tracing";
import { environment, machineLine, table, writeResult } from "./report.js";
import { integerOption, runBench } from "./stack.js";
import { median } from "./throughput-helpers.js";
import { startSink } from "./tracing.js";

const { values: args } = parseArgs({
  options: {
    spans: { type: "string", default: "100000" },
    rounds: { type: "string", default: "3" },
    rate: { type: "string", default: "20000" },
    help: { type: "boolean", default: false },
  },
});
if (args.help) {
  console.log(`span-cost: the CPU of one kept span, exported (the service's step helper and SDK set-up, no server)
  --spans 100000   steps per round (each round: that many with a span, then as many without)
  --rounds 3       rounds
  --rate 20000     steps a second (the exporter must keep up: its queue is never full)`);
  process.exit(0);
}
const options = {
  spans: integerOption("spans", args.spans, 1000, 10_000_000),
  rounds: integerOption("rounds", args.rounds, 1, 50),
  rate: integerOption("rate", args.rate, 100, 1_000_000),
};

/** The attributes of a service step (the commit's): a kept span as the service makes it. */
const ATTRIBUTES = { "plant.id": 1, "store.partition": 7 };
const step = async () => {};

/** CPU µs of this process (all its threads) while `count` steps run, `perTick` every 10 ms. */
async function cpuOfSteps(count: number, traced: boolean): Promise<number> {
  const perTick = Math.max(1, Math.round(options.rate / 100));
  const before = process.cpuUsage();
  for (let done = 0; done < count; ) {
    const tick = sleep(10);
    for (const end = Math.min(count, done + perTick); done < end; done++) {
      await (traced ? inSpan("store commit", step, { attributes: ATTRIBUTES }) : step());
    }
    await tick;
  }
  await sleep(500); // the last batch's export (OTEL_BSP_SCHEDULE_DELAY 100 ms)
  const used = process.cpuUsage(before);
  return used.user + used.system;
}

/** Steps of each kind before the measured rounds: compiled code, a kept connection. */
const warmupSteps = options.spans / 2;
/** The steps' paced time (both kinds, warm-up and rounds), twice over, and a minute. */
const limitMs = (2 * (warmupSteps + options.rounds * options.spans) * 2000) / options.rate + 60_000;

await runBench("span-cost", limitMs, async () => {
  console.log(machineLine());
  const sink = await startSink();
  // In process.env, not an `env` of startTracing's: the SDK's exporter reads its endpoint there
  // (a traces endpoint given to the bench would win over it).
  delete process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  Object.assign(process.env, {
    OTEL_EXPORTER_OTLP_ENDPOINT: sink.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf",
    OTEL_TRACES_SAMPLER: "always_on",
    OTEL_BSP_SCHEDULE_DELAY: "100",
    OTEL_BSP_MAX_QUEUE_SIZE: "1000000",
  });
  const tracing = await startTracing({ defaultServiceName: "span-cost" });
  try {
    await cpuOfSteps(warmupSteps, true);
    await cpuOfSteps(warmupSteps, false);
    const rounds: { spanUs: number; plainUs: number }[] = [];
    for (let round = 0; round < options.rounds; round++) {
      const traced = await cpuOfSteps(options.spans, true);
      const plain = await cpuOfSteps(options.spans, false);
      rounds.push({ spanUs: traced / options.spans, plainUs: plain / options.spans });
    }
    // Spans that never reached the sink were not measured as kept and sent (an exporter pointed elsewhere fails cheaply).
    if (sink.received.requests === 0) throw new Error("the OTLP sink received no export: no span was sent");
    const perSpan = rounds.map(({ spanUs, plainUs }) => spanUs - plainUs);
    const rows = rounds.map(({ spanUs, plainUs }, i) => [
      String(i + 1),
      spanUs.toFixed(2),
      plainUs.toFixed(2),
      (perSpan[i] as number).toFixed(2),
    ]);
    console.log(`\n${options.spans} steps a round at ${options.rate} a second; CPU µs per step (all threads):`);
    console.log(table(["round", "with a kept span", "without", "a span's cost"], rows));
    console.log(
      `\na kept span: ${median(perSpan).toFixed(2)} µs of CPU (median); OTLP sink: ${sink.received.requests} exports, ` +
        `${(sink.received.bytes / (warmupSteps + options.rounds * options.spans)).toFixed(0)} bytes a span`,
    );
    const path = writeResult("span-cost", { environment: environment(), options, rounds, sink: sink.received });
    console.log(`\nok; written ${path}`);
  } finally {
    await tracing.shutdown();
    sink.close();
  }
  return true;
});
