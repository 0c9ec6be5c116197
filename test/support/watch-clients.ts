import assert from "node:assert/strict";
import http2 from "node:http2";
import https from "node:https";
import { create, createRegistry, fromBinary, toJson } from "@bufbuild/protobuf";
import { anyUnpack, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { ConnectError, createClient } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { ErrorInfoSchema, file_google_rpc_error_details } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";
import { EventSchema, EventsService, WatchEventsRequestSchema, type Event } from "../../gen/platformapi/events/v1/events_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { testTransport, type TransportKind } from "./connect.js";

/**
 * WatchEvents clients for every protocol the one port speaks: grpc-js,
 * connect-node's Connect, gRPC-Web and gRPC over HTTP/1.1 and h2c, and REST
 * (NDJSON) over HTTP/1.1 and h2c, all behind one shape: when the response
 * headers came, each event and each heartbeat as they arrive, and how the
 * stream ended (a code and an ErrorInfo reason).
 */

/** The protocols WatchEvents is served on. */
export const WATCH_PROTOCOLS = [
  "grpc-js",
  "connect-h1",
  "grpc-web-h1",
  "connect-h2c",
  "grpc-web-h2c",
  "grpc-h2c",
  "rest-h1",
  "rest-h2c",
] as const;
export type WatchProtocol = (typeof WATCH_PROTOCOLS)[number];

/** What a test sees of one message (an event or a heartbeat). */
export interface SeenEvent {
  id: string;
  type: string;
  subject: string;
  group: string;
  cursor: string;
  /** The message's REST JSON (the same codec as ListEvents'), or toJson of the message. */
  json: Record<string, unknown>;
  /** Its place among the messages of its stream, events and heartbeats together (from 1). */
  arrival?: number;
}

/** How a stream ended: code 0 for OK. */
export interface StreamEnd {
  code: number;
  reason: string;
  /** The ErrorInfo's metadata (e.g. WATCH_LIMIT's scope and limit); empty when there is none. */
  metadata?: Record<string, string>;
  /** REST only: the HTTP status, and whether the error came as the body's last {"error": …} line. */
  httpStatus?: number;
  errorLine?: boolean;
}

/** An open watch: its headers, events and heartbeats as they arrive, then its end. */
export interface Watch {
  /** Resolves when the response headers (gRPC: the initial metadata) have arrived; never, if the stream ends first. */
  readonly opened: Promise<void>;
  /** Resolves when the first message (an event or a heartbeat) has arrived; never, if the stream ends first. */
  readonly received: Promise<void>;
  /** Resolves with the next n events (rejects if the stream ends first); heartbeats are not events. */
  take(n: number): Promise<SeenEvent[]>;
  /** Resolves with the next n heartbeats (rejects if the stream ends first). */
  heartbeats(n: number): Promise<SeenEvent[]>;
  /** Resolves once the stream has ended, with every event not yet taken. */
  end(): Promise<{ rest: SeenEvent[]; end: StreamEnd }>;
  /** Whether the stream has ended. */
  readonly ended: boolean;
  /** Hangs up. */
  cancel(): void;
}

export interface WatchRequestInit {
  cursor?: string;
  startTimeMs?: number;
  typePrefix?: string;
  descendantsOf?: string;
}

/** TLS to a proxy in front: trust this CA, and name the host "localhost" (SNI and :authority). */
export interface WatchTls {
  ca: Buffer;
}

/** The type of a WatchEvents heartbeat, as the contract (events.proto) names it. */
export const HEARTBEAT_TYPE = "api.platform.events.heartbeat.v1";

const registry = createRegistry(file_google_rpc_error_details);

/** Opens a watch on protocol to the server (or proxy) at baseUrl, as token. With tls, only grpc-js and rest-h1 are offered. */
export function openWatch(protocol: WatchProtocol, baseUrl: string, token: string, init: WatchRequestInit = {}, tls?: WatchTls): Watch {
  const queue = new EventQueue();
  if (tls && protocol !== "grpc-js" && protocol !== "rest-h1") throw new Error(`${protocol} is not offered over TLS here`);
  if (protocol === "grpc-js") grpcJsWatch(baseUrl, token, init, queue, tls);
  else if (protocol === "rest-h1") restH1Watch(baseUrl, token, init, queue, tls);
  else if (protocol === "rest-h2c") restH2Watch(baseUrl, token, init, queue);
  else connectWatch(protocol, baseUrl, token, init, queue);
  return queue;
}

/** The WatchEventsRequest message of init. */
export function watchRequest(init: WatchRequestInit) {
  return create(WatchEventsRequestSchema, {
    cursor: init.cursor ?? "",
    typePrefix: init.typePrefix ?? "",
    startTime: init.startTimeMs === undefined ? undefined : timestampFromMs(init.startTimeMs),
    uidp: init.descendantsOf ? { descendantsOf: init.descendantsOf } : undefined,
  });
}

function restQuery(init: WatchRequestInit): string {
  const q = new URLSearchParams();
  if (init.cursor) q.set("cursor", init.cursor);
  if (init.startTimeMs !== undefined) q.set("start_time", new Date(init.startTimeMs).toISOString());
  if (init.typePrefix) q.set("type_prefix", init.typePrefix);
  if (init.descendantsOf) q.set("uidp.descendants_of", init.descendantsOf);
  return `/events/v1/events:watch?${q}`;
}

function fromMessage(e: Event): SeenEvent {
  return { id: e.id, type: e.type, subject: e.subject, group: e.group, cursor: e.cursor, json: toJson(EventSchema, e) as never };
}

function fromJson(json: Record<string, unknown>): SeenEvent {
  const s = (k: string) => (json[k] === undefined ? "" : String(json[k]));
  return { id: s("id"), type: s("type"), subject: s("subject"), group: s("group"), cursor: s("cursor"), json };
}

type JsonDetail = { "@type"?: string; reason?: string; metadata?: Record<string, string> };

/** The reason and metadata of the ErrorInfo among a REST error's details. */
function infoOf(details: JsonDetail[]): { reason: string; metadata: Record<string, string> } {
  const info = details.find((d) => d["@type"] === "type.googleapis.com/google.rpc.ErrorInfo");
  return { reason: info?.reason ?? "", metadata: info?.metadata ?? {} };
}

class EventQueue implements Watch {
  private readonly events: SeenEvent[] = [];
  private readonly beats: SeenEvent[] = [];
  private finished: StreamEnd | undefined;
  private readonly waiters = new Set<() => void>();
  private markOpen: () => void = () => {};
  readonly opened = new Promise<void>((resolve) => (this.markOpen = resolve));
  private markReceived: () => void = () => {};
  readonly received = new Promise<void>((resolve) => (this.markReceived = resolve));
  cancel: () => void = () => {};

  open(): void {
    this.markOpen();
  }

  private arrivals = 0;

  push(e: SeenEvent): void {
    e.arrival = ++this.arrivals;
    this.markReceived();
    (e.type === HEARTBEAT_TYPE ? this.beats : this.events).push(e);
    this.wake();
  }

  finish(end: StreamEnd): void {
    this.finished ??= end;
    this.wake();
  }

  get ended(): boolean {
    return this.finished !== undefined;
  }

  private wake(): void {
    for (const waiter of this.waiters) waiter();
    this.waiters.clear();
  }

  private async until(ready: () => boolean): Promise<void> {
    while (!ready()) await new Promise<void>((resolve) => this.waiters.add(resolve));
  }

  private async next(list: SeenEvent[], n: number, what: string): Promise<SeenEvent[]> {
    await this.until(() => list.length >= n || this.finished !== undefined);
    if (list.length < n) throw new Error(`stream ended after ${list.length} of ${n} ${what}: ${JSON.stringify(this.finished)}`);
    return list.splice(0, n);
  }

  take(n: number): Promise<SeenEvent[]> {
    return this.next(this.events, n, "events");
  }

  heartbeats(n: number): Promise<SeenEvent[]> {
    return this.next(this.beats, n, "heartbeats");
  }

  async end(): Promise<{ rest: SeenEvent[]; end: StreamEnd }> {
    await this.until(() => this.finished !== undefined);
    return { rest: this.events.splice(0), end: this.finished! };
  }
}

const method = EventsService.method.watchEvents;

function grpcJsWatch(baseUrl: string, token: string, init: WatchRequestInit, queue: EventQueue, tls?: WatchTls): void {
  const Ctor = grpc.makeGenericClientConstructor({ watchEvents: methodDefinition(EventsService, method) }, EventsService.typeName);
  const { port } = new URL(baseUrl);
  const client = tls
    ? new Ctor(`127.0.0.1:${port}`, grpc.credentials.createSsl(tls.ca), {
        "grpc.ssl_target_name_override": "localhost",
        "grpc.default_authority": `localhost:${port}`,
      })
    : new Ctor(new URL(baseUrl).host, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  if (token) md.set("authorization", `Bearer ${token}`);
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const call = (client as any).watchEvents(watchRequest(init), md) as grpc.ClientReadableStream<Event>;
  call.on("metadata", () => queue.open());
  call.on("data", (e: Event) => queue.push(fromMessage(e)));
  call.on("error", () => {});
  call.on("status", (status: grpc.StatusObject) => {
    const bin = status.metadata.get("grpc-status-details-bin")[0];
    const details = bin instanceof Buffer ? fromBinary(StatusSchema, bin).details.map((d) => anyUnpack(d, registry)) : [];
    const info = details.find((d) => d?.$typeName === ErrorInfoSchema.typeName) as
      | { reason: string; metadata: Record<string, string> }
      | undefined;
    queue.finish({ code: status.code, reason: info?.reason ?? "", metadata: { ...info?.metadata } });
    client.close();
  });
  queue.cancel = () => call.cancel();
}

function connectWatch(protocol: TransportKind, baseUrl: string, token: string, init: WatchRequestInit, queue: EventQueue): void {
  const t = testTransport(protocol, baseUrl, token);
  const abort = new AbortController();
  queue.cancel = () => abort.abort();
  void (async () => {
    try {
      const options = { signal: abort.signal, onHeader: () => queue.open() };
      for await (const e of createClient(EventsService, t.transport).watchEvents(watchRequest(init), options)) queue.push(fromMessage(e));
      queue.finish({ code: 0, reason: "" });
    } catch (err) {
      const e = ConnectError.from(err);
      const info = e.findDetails(ErrorInfoSchema)[0];
      queue.finish({ code: e.code, reason: info?.reason ?? "", metadata: { ...info?.metadata } });
    } finally {
      t.close();
    }
  })();
}

/** Reads NDJSON lines: {"result": …} per message, a last {"error": …} on failure. */
function readLines(status: number, chunks: AsyncIterable<Uint8Array | string>, queue: EventQueue): Promise<void> {
  return (async () => {
    let text = "";
    let body = "";
    for await (const chunk of chunks) {
      text += typeof chunk === "string" ? chunk : Buffer.from(chunk).toString("utf8");
      if (status !== 200) continue;
      for (let nl = text.indexOf("\n"); nl >= 0; nl = text.indexOf("\n")) {
        const line = JSON.parse(text.slice(0, nl)) as { result?: Record<string, unknown>; error?: { code: number; details: JsonDetail[] } };
        text = text.slice(nl + 1);
        if (line.result) queue.push(fromJson(line.result));
        else if (line.error) queue.finish({ code: line.error.code, ...infoOf(line.error.details), httpStatus: status, errorLine: true });
        else throw new Error(`neither result nor error: ${JSON.stringify(line)}`);
      }
      body = text;
    }
    if (status !== 200) {
      const error = JSON.parse(text) as { code: number; details: JsonDetail[] };
      return queue.finish({ code: error.code, ...infoOf(error.details), httpStatus: status, errorLine: false });
    }
    assert.equal(body, "", "the body ends with a complete line");
    queue.finish({ code: 0, reason: "", httpStatus: status });
  })().catch((err: unknown) => queue.finish({ code: -1, reason: String(err) }));
}

/** The NDJSON Content-Type of a 200, checked before its lines are read. */
function checkType(status: number, contentType: string | undefined | null): void {
  if (status === 200) assert.equal(contentType, "application/x-ndjson");
}

function restH1Watch(baseUrl: string, token: string, init: WatchRequestInit, queue: EventQueue, tls?: WatchTls): void {
  if (tls) return restH1TlsWatch(baseUrl, token, init, queue, tls);
  const abort = new AbortController();
  queue.cancel = () => abort.abort();
  void (async () => {
    try {
      const res = await fetch(`${baseUrl}${restQuery(init)}`, { headers: { authorization: `Bearer ${token}` }, signal: abort.signal });
      checkType(res.status, res.headers.get("content-type"));
      queue.open();
      await readLines(res.status, res.body!, queue);
    } catch (err) {
      queue.finish({ code: 1, reason: String(err) });
    }
  })();
}

/** REST over HTTP/1.1 and TLS (fetch cannot be given a CA): node's https, SNI localhost. */
function restH1TlsWatch(baseUrl: string, token: string, init: WatchRequestInit, queue: EventQueue, tls: WatchTls): void {
  const { port } = new URL(baseUrl);
  const req = https.request(
    {
      host: "127.0.0.1",
      port,
      servername: "localhost",
      ca: tls.ca,
      path: restQuery(init),
      headers: { authorization: `Bearer ${token}`, host: `localhost:${port}` },
      agent: false,
    },
    (res) => {
      checkType(res.statusCode!, res.headers["content-type"]);
      queue.open();
      void readLines(res.statusCode!, res, queue);
    },
  );
  req.on("error", (err) => queue.finish({ code: 1, reason: String(err) }));
  req.end();
  queue.cancel = () => req.destroy();
}

function restH2Watch(baseUrl: string, token: string, init: WatchRequestInit, queue: EventQueue): void {
  const session = http2.connect(baseUrl);
  session.on("error", () => {});
  const req = session.request({ ":method": "GET", ":path": restQuery(init), authorization: `Bearer ${token}` });
  req.on("error", () => {});
  queue.cancel = () => {
    req.close(http2.constants.NGHTTP2_CANCEL);
    session.close();
  };
  req.once("response", (headers) => {
    const status = Number(headers[":status"]);
    checkType(status, headers["content-type"]);
    queue.open();
    void readLines(status, req, queue).finally(() => session.close());
  });
  req.once("close", () => queue.finish({ code: 1, reason: "stream closed" }));
}
