// An OTLP/HTTP trace receiver of the tests' own: what the api's and the worker's exporters send to
// POST /v1/traces, decoded from protobuf (the official opentelemetry-proto messages, read by the
// wire format's rules below) or JSON (OTLP/JSON: ids as hex), kept as a flat list of spans.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

/** A span as received: its ids as hex, its service (resource `service.name`), its links. */
export interface ReceivedSpan {
  service: string;
  name: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  links: { traceId: string; spanId: string }[];
}

/** One protobuf field: its number, and its value (a number for varints, the bytes otherwise). */
type Field = { number: number; value: number | Uint8Array };

/** The fields of one protobuf message, in order (proto3 wire format: varint, I64, LEN, I32). */
function fieldsOf(bytes: Uint8Array): Field[] {
  const fields: Field[] = [];
  let at = 0;
  const varint = () => {
    let value = 0;
    let shift = 0;
    for (;;) {
      const byte = bytes[at++] as number;
      value += (byte & 0x7f) * 2 ** shift;
      shift += 7;
      if (byte < 0x80) return value;
    }
  };
  while (at < bytes.length) {
    const key = varint();
    const wireType = key % 8;
    const number = Math.floor(key / 8);
    if (wireType === 0) fields.push({ number, value: varint() });
    else if (wireType === 1 || wireType === 5) {
      const size = wireType === 1 ? 8 : 4;
      fields.push({ number, value: bytes.subarray(at, at + size) });
      at += size;
    } else if (wireType === 2) {
      const length = varint();
      fields.push({ number, value: bytes.subarray(at, at + length) });
      at += length;
    } else throw new Error(`unsupported protobuf wire type ${wireType}`);
  }
  return fields;
}

const messages = (fields: Field[], number: number) =>
  fields.filter((field) => field.number === number).map((field) => field.value as Uint8Array);
const hex = (bytes: Uint8Array | undefined) => (bytes ? Buffer.from(bytes).toString("hex") : "");
const text = (bytes: Uint8Array | undefined) => (bytes ? Buffer.from(bytes).toString("utf8") : "");

/** Resource.attributes (1) → KeyValue{key 1, value 2: AnyValue{string_value 1}}: its service.name. */
function serviceOf(resource: Uint8Array | undefined): string {
  for (const keyValue of messages(resource ? fieldsOf(resource) : [], 1)) {
    const fields = fieldsOf(keyValue);
    if (text(messages(fields, 1)[0]) !== "service.name") continue;
    return text(messages(fieldsOf(messages(fields, 2)[0] ?? new Uint8Array()), 1)[0]);
  }
  return "";
}

/** ExportTraceServiceRequest: resource_spans (1) → resource (1), scope_spans (2) → spans (2). */
export function decodeProtobuf(body: Uint8Array): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  for (const resourceSpans of messages(fieldsOf(body), 1)) {
    const fields = fieldsOf(resourceSpans);
    const service = serviceOf(messages(fields, 1)[0]);
    for (const scopeSpans of messages(fields, 2)) {
      for (const span of messages(fieldsOf(scopeSpans), 2)) {
        // Span: trace_id 1, span_id 2, parent_span_id 4, name 5, links 13 (Link: trace_id 1, span_id 2).
        const s = fieldsOf(span);
        spans.push({
          service,
          name: text(messages(s, 5)[0]),
          traceId: hex(messages(s, 1)[0]),
          spanId: hex(messages(s, 2)[0]),
          parentSpanId: hex(messages(s, 4)[0]),
          links: messages(s, 13).map((link) => {
            const l = fieldsOf(link);
            return { traceId: hex(messages(l, 1)[0]), spanId: hex(messages(l, 2)[0]) };
          }),
        });
      }
    }
  }
  return spans;
}

type JsonSpan = { name: string; traceId: string; spanId: string; parentSpanId?: string; links?: JsonSpan[] };
type JsonRequest = {
  resourceSpans?: {
    resource?: { attributes?: { key: string; value: { stringValue?: string } }[] };
    scopeSpans?: { spans?: JsonSpan[] }[];
  }[];
};

/** OTLP/JSON: the same messages, ids as hex strings. */
export function decodeJson(body: string): ReceivedSpan[] {
  const request = JSON.parse(body) as JsonRequest;
  return (request.resourceSpans ?? []).flatMap((resourceSpans) => {
    const service =
      resourceSpans.resource?.attributes?.find((attribute) => attribute.key === "service.name")?.value.stringValue ??
      "";
    return (resourceSpans.scopeSpans ?? []).flatMap((scope) =>
      (scope.spans ?? []).map((span) => ({
        service,
        name: span.name,
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: span.parentSpanId ?? "",
        links: (span.links ?? []).map((link) => ({ traceId: link.traceId, spanId: link.spanId })),
      })),
    );
  });
}

/** Starts the receiver on a free port of 127.0.0.1: `endpoint` is what OTEL_EXPORTER_OTLP_ENDPOINT takes. */
export async function startOtlpReceiver() {
  const spans: ReceivedSpan[] = [];
  const requests: { path: string; contentType: string }[] = [];
  const server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const contentType = request.headers["content-type"] ?? "";
      requests.push({ path: request.url ?? "", contentType });
      const body = Buffer.concat(chunks);
      const json = contentType.startsWith("application/json");
      spans.push(...(json ? decodeJson(body.toString("utf8")) : decodeProtobuf(body)));
      // An empty ExportTraceServiceResponse: full success.
      response.writeHead(200, { "content-type": json ? "application/json" : "application/x-protobuf" });
      response.end(json ? "{}" : "");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    requests,
    inTrace: (traceId: string) => spans.filter((span) => span.traceId === traceId),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export type OtlpReceiver = Awaited<ReturnType<typeof startOtlpReceiver>>;
