import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync } from "node:zlib";

/**
 * An OTLP/HTTP collector on loopback for the tracing tests: it takes
 * ExportTraceServiceRequest bodies (POST /v1/traces, gzip or not) in either
 * encoding OTLP/HTTP has, JSON or binary protobuf (decoded here from the
 * wire format with the field numbers of opentelemetry-proto's trace.proto),
 * answers 200 as a collector does, and keeps every span with its resource,
 * flattened so a test can check its ids, parent link, kind, attributes and
 * status.
 */

/** An attribute value as OTLP's JSON encodes one (AnyValue); int64 values arrive as strings or numbers. */
interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
}

interface KeyValue {
  key: string;
  value: AnyValue;
}

/** One span as received, ids as lower-case hex ("" for a root span's parent). */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, string | number | boolean>;
  /** OTLP StatusCode: 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string };
  /** The attributes of the resource that sent it (service.name, service.version, ...). */
  resource: Record<string, string | number | boolean>;
}

/** The span kinds of OTLP, by name. */
export const SPAN_KIND = { internal: 1, server: 2, client: 3 } as const;

/** The collector. */
export interface OtlpReceiver {
  /** http://127.0.0.1:<port>: what OTEL_EXPORTER_OTLP_ENDPOINT names (the exporter appends /v1/traces). */
  readonly url: string;
  /** Every span received so far, in arrival order. */
  readonly spans: ReceivedSpan[];
  /** The headers of every export request received, in order (content-type tells the encoding). */
  readonly requests: IncomingHttpHeaders[];
  /** Paths requested that are not /v1/traces (answered 404). */
  readonly strays: string[];
  /** Resolves with the spans once pick accepts them (pick returns a value, not undefined); rejects after timeoutMs. */
  waitFor<T>(pick: (spans: readonly ReceivedSpan[]) => T | undefined, timeoutMs?: number): Promise<T>;
  close(): Promise<void>;
}

function valueOf(v: AnyValue): string | number | boolean {
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  return "";
}

function attributesOf(list: KeyValue[] | undefined): Record<string, string | number | boolean> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, valueOf(kv.value)]));
}

/** Flattens one ExportTraceServiceRequest (JSON) into spans. */
function spansOf(body: unknown): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  const request = body as {
    resourceSpans?: { resource?: { attributes?: KeyValue[] }; scopeSpans?: { spans?: Record<string, unknown>[] }[] }[];
  };
  for (const rs of request.resourceSpans ?? []) {
    const resource = attributesOf(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        const status = (s.status ?? {}) as { code?: number; message?: string };
        out.push({
          traceId: String(s.traceId ?? "").toLowerCase(),
          spanId: String(s.spanId ?? "").toLowerCase(),
          parentSpanId: String(s.parentSpanId ?? "").toLowerCase(),
          name: String(s.name),
          kind: Number(s.kind ?? 0),
          attributes: attributesOf(s.attributes as KeyValue[] | undefined),
          status: { code: status.code ?? 0, message: status.message ?? "" },
          resource,
        });
      }
    }
  }
  return out;
}

/** A protobuf message's fields by number: varints as bigint, length-delimited ones as bytes (fixed-width ones skipped). */
function protoFields(buf: Buffer): Map<number, (bigint | Buffer)[]> {
  const fields = new Map<number, (bigint | Buffer)[]>();
  let at = 0;
  const varint = (): bigint => {
    let value = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const byte = buf[at++]!;
      value |= BigInt(byte & 0x7f) << shift;
      if (byte < 0x80) return value;
    }
  };
  while (at < buf.length) {
    const key = Number(varint());
    const [number, wire] = [key >>> 3, key & 7];
    const add = (v: bigint | Buffer) => fields.set(number, [...(fields.get(number) ?? []), v]);
    if (wire === 0) add(varint());
    else if (wire === 2) {
      const length = Number(varint());
      add(buf.subarray(at, at + length));
      at += length;
    } else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else throw new Error(`wire type ${wire}`);
  }
  return fields;
}

const bytesOf = (fields: Map<number, (bigint | Buffer)[]>, n: number): Buffer[] => (fields.get(n) ?? []) as Buffer[];
const textOf = (fields: Map<number, (bigint | Buffer)[]>, n: number): string => bytesOf(fields, n)[0]?.toString("utf8") ?? "";
const numberOf = (fields: Map<number, (bigint | Buffer)[]>, n: number): number => Number((fields.get(n)?.[0] as bigint | undefined) ?? 0n);

/** KeyValue{1: key, 2: AnyValue{1: string, 2: bool, 3: int}} list (doubles do not occur in our spans). */
function protoAttributes(list: Buffer[]): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const kv of list.map(protoFields)) {
    const value = protoFields(bytesOf(kv, 2)[0] ?? Buffer.alloc(0));
    out[textOf(kv, 1)] = value.has(1) ? textOf(value, 1) : value.has(2) ? numberOf(value, 2) === 1 : numberOf(value, 3);
  }
  return out;
}

/** Flattens one ExportTraceServiceRequest in binary protobuf into spans. */
function spansOfProtobuf(body: Buffer): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  // ExportTraceServiceRequest{1: ResourceSpans{1: Resource{1: attributes}, 2: ScopeSpans{2: Span}}}
  for (const rs of bytesOf(protoFields(body), 1).map(protoFields)) {
    const resource = protoAttributes(bytesOf(protoFields(bytesOf(rs, 1)[0] ?? Buffer.alloc(0)), 1));
    for (const ss of bytesOf(rs, 2).map(protoFields)) {
      // Span{1: trace_id, 2: span_id, 4: parent_span_id, 5: name, 6: kind, 9: attributes, 15: Status{2: message, 3: code}}
      for (const s of bytesOf(ss, 2).map(protoFields)) {
        const status = protoFields(bytesOf(s, 15)[0] ?? Buffer.alloc(0));
        out.push({
          traceId: bytesOf(s, 1)[0]?.toString("hex") ?? "",
          spanId: bytesOf(s, 2)[0]?.toString("hex") ?? "",
          parentSpanId: bytesOf(s, 4)[0]?.toString("hex") ?? "",
          name: textOf(s, 5),
          kind: numberOf(s, 6),
          attributes: protoAttributes(bytesOf(s, 9)),
          status: { code: numberOf(status, 3), message: textOf(status, 2) },
          resource,
        });
      }
    }
  }
  return out;
}

/** Starts a collector on a free loopback port. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const requests: IncomingHttpHeaders[] = [];
  const strays: string[] = [];
  let wake: (() => void)[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        strays.push(`${req.method} ${req.url}`);
        res.writeHead(404).end();
        return;
      }
      requests.push(req.headers);
      let raw = Buffer.concat(chunks);
      if (req.headers["content-encoding"] === "gzip") raw = gunzipSync(raw);
      const protobuf = req.headers["content-type"] === "application/x-protobuf";
      try {
        spans.push(...(protobuf ? spansOfProtobuf(raw) : spansOf(JSON.parse(raw.toString("utf8")))));
      } catch {
        res.writeHead(400).end();
        return;
      }
      if (protobuf) res.writeHead(200, { "content-type": "application/x-protobuf" }).end();
      else res.writeHead(200, { "content-type": "application/json" }).end("{}");
      for (const w of wake.splice(0)) w();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    spans,
    requests,
    strays,
    async waitFor(pick, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const picked = pick(spans);
        if (picked !== undefined) return picked;
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`spans not received within ${timeoutMs} ms; got ${spans.map((s) => s.name).join(", ")}`);
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          wake.push(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        wake = [];
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
