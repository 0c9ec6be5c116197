import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before } from "node:test";
import { createRemoteJWKSet, jwtVerify, type JWTPayload } from "jose";
import { DELIVERY_TOKEN_TYPE } from "../../src/auth/tokens.js";
import { verifyWebhook } from "../../src/delivery/signature.js";
import { eventType, type EventKind, type EventRecord } from "../../src/domain/events.js";
import { startTestServer, type TestServer } from "./server.js";

/**
 * A subscriber's endpoint on loopback, for the delivery tests: each sink (a
 * path on one HTTP server) checks every delivery the way a receiver should —
 * the bearer token against the platform's JWKS (ES256, iss, aud = the sink's
 * URL, typ webhook+jwt) and the Standard Webhooks signature with the sink's
 * secret — records it, and answers as the test told it: a status, or hang.
 * A delivery that fails either check is answered 401 whatever the sink was
 * told, so a broken signature or token shows up as a failed delivery.
 */

/** How a sink answers a delivery that verified. */
export type SinkBehaviour = { status: number; location?: string; body?: string } | { hangMs: number };

/** One request a sink received, with what its checks found. */
export interface ReceivedDelivery {
  headers: IncomingHttpHeaders;
  /** The exact body, as UTF-8 text. */
  body: string;
  /** The verified token's claims, or null (then tokenError says why). */
  claims: JWTPayload | null;
  tokenError: string;
  /** The webhook id once the signature verified, or "" (then signatureError says why). */
  webhookId: string;
  signatureError: string;
  /** What the sink answered (0 while hanging, or when the hang ended with the connection). */
  status: number;
}

/** One subscriber endpoint of the receiver. */
export interface Sink {
  /** http://127.0.0.1:<port>/<name>: the subscription's sink URL, and the audience its tokens must carry. */
  readonly url: string;
  /** The subscription's "whsec_…" secret (shown once at create): set it before deliveries arrive. */
  secret: string;
  /** Every request received, in order. */
  readonly deliveries: ReceivedDelivery[];
  /** How to answer from now on (the default is 204). */
  behave(behaviour: SinkBehaviour): void;
  /** Resolves once count requests have arrived; rejects after timeoutMs (a liveness bound, not a timing). */
  waitForDeliveries(count: number, timeoutMs?: number): Promise<ReceivedDelivery[]>;
}

/** The receiver: one loopback HTTP server with named sinks. */
export interface EventReceiver {
  /** http://127.0.0.1:<port> */
  readonly url: string;
  /** The sink at /<name>, created on first use. */
  sink(name: string): Sink;
  /** Requests to paths that are no sink's (answered 404). */
  readonly strays: string[];
  /** Answers every hanging request now (204). */
  releaseHangs(): void;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 1024 * 1024;

class ReceiverSink implements Sink {
  secret = "";
  readonly deliveries: ReceivedDelivery[] = [];
  private behaviour: SinkBehaviour = { status: 204 };
  private waiters: (() => void)[] = [];

  constructor(readonly url: string) {}

  behave(behaviour: SinkBehaviour): void {
    this.behaviour = behaviour;
  }

  get current(): SinkBehaviour {
    return this.behaviour;
  }

  record(delivery: ReceivedDelivery): void {
    this.deliveries.push(delivery);
    for (const wake of this.waiters.splice(0)) wake();
  }

  async waitForDeliveries(count: number, timeoutMs = 30_000): Promise<ReceivedDelivery[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.deliveries.length < count) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`${this.url}: ${this.deliveries.length} of ${count} deliveries within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return this.deliveries.slice(0, count);
  }
}

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) return req.destroy(new Error("body too large"));
      chunks.push(chunk);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

const why = (err: unknown) => (err instanceof Error ? `${err.name}: ${err.message}` : String(err));

/**
 * Starts a receiver on 127.0.0.1 whose sinks verify tokens against jwksUrl
 * (the platform's /.well-known/jwks.json) and issuer (its auth URL), or
 * those of a test server.
 */
export async function startEventReceiver(from: TestServer | { jwksUrl: string; issuer: string }): Promise<EventReceiver> {
  const opts = "server" in from ? { jwksUrl: `${from.url}/.well-known/jwks.json`, issuer: from.server.tokens.issuer } : from;
  const jwks = createRemoteJWKSet(new URL(opts.jwksUrl));
  const sinks = new Map<string, ReceiverSink>();
  const strays: string[] = [];
  const hanging = new Set<() => void>();

  async function check(sink: ReceiverSink, req: IncomingMessage, body: Buffer): Promise<ReceivedDelivery> {
    const delivery: ReceivedDelivery = {
      headers: req.headers,
      body: body.toString("utf8"),
      claims: null,
      tokenError: "",
      webhookId: "",
      signatureError: "",
      status: 0,
    };
    const bearer = /^Bearer (\S+)$/.exec(req.headers.authorization ?? "");
    try {
      if (!bearer) throw new Error("no bearer token");
      const { payload } = await jwtVerify(bearer[1]!, jwks, {
        algorithms: ["ES256"],
        issuer: opts.issuer,
        audience: sink.url,
        typ: DELIVERY_TOKEN_TYPE,
        requiredClaims: ["exp", "iat", "sub"],
      });
      delivery.claims = payload;
    } catch (err) {
      delivery.tokenError = why(err);
    }
    try {
      delivery.webhookId = verifyWebhook(sink.secret, req.headers, body);
    } catch (err) {
      delivery.signatureError = why(err);
    }
    return delivery;
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const sink = sinks.get(new URL(req.url ?? "/", "http://receiver").pathname.slice(1));
    const body = await readBody(req);
    if (!sink) {
      strays.push(req.url ?? "");
      res.writeHead(404).end();
      return;
    }
    const delivery = await check(sink, req, body);
    const behaviour = sink.current;
    sink.record(delivery);
    if (delivery.claims === null || delivery.webhookId === "") {
      delivery.status = 401;
      res.writeHead(401).end();
    } else if ("hangMs" in behaviour) {
      const answer = () => {
        clearTimeout(timer);
        hanging.delete(answer);
        if (res.destroyed) return;
        delivery.status = 204;
        res.writeHead(204).end();
      };
      const timer = setTimeout(answer, behaviour.hangMs);
      hanging.add(answer);
      res.on("close", () => {
        clearTimeout(timer);
        hanging.delete(answer);
      });
    } else {
      delivery.status = behaviour.status;
      res.writeHead(behaviour.status, behaviour.location ? { location: behaviour.location } : {}).end(behaviour.body);
    }
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    strays,
    sink(name: string): Sink {
      let sink = sinks.get(name);
      if (!sink) sinks.set(name, (sink = new ReceiverSink(`${url}/${name}`)));
      return sink;
    },
    releaseHangs() {
      for (const answer of [...hanging]) answer();
    },
    async close() {
      for (const answer of [...hanging]) answer();
      server.closeAllConnections();
      await new Promise<void>((resolve, reject) => server.close((err) => (err ? reject(err) : resolve())));
    },
  };
}

/**
 * A test server and a receiver of its deliveries, started before the tests of the file (or describe) and stopped
 * after them: read them in the tests, as world.srv and world.receiver.
 */
export function receivingServer(): { readonly srv: TestServer; readonly receiver: EventReceiver } {
  let srv: TestServer | undefined;
  let receiver: EventReceiver | undefined;
  before(async () => {
    srv = await startTestServer();
    receiver = await startEventReceiver(srv);
  });
  after(async () => {
    await receiver?.close();
    await srv?.close();
  });
  return {
    get srv() {
      return srv!;
    },
    get receiver() {
      return receiver!;
    },
  };
}

/** The subscription of the deliveries the tests make by hand. */
export const SUBSCRIPTION = "5b0c7c1e-7a1e-4c3e-9a55-4bb0d5c8e0aa";
/** The group of the events the tests deliver by hand. */
export const EVENT_GROUP = "9d7c2f3a-0000-4000-8000-00000000000a";

/**
 * The n-th event the tests deliver by hand, as the store hands it to the delivery loop: the `created` event of
 * a resource of kind in EVENT_GROUP (body, its uid the subject), by an actor, in request r-n.
 */
export function createdEvent(kind: EventKind, n: number, body: { uid: string; [field: string]: unknown }): EventRecord {
  return {
    id: `0b7c8a3e-5f7e-4c55-9a55-${String(n).padStart(12, "0")}`,
    kind,
    type: eventType(kind, "created"),
    subject: body.uid,
    groupUid: EVENT_GROUP,
    time: Date.UTC(2025, 0, 2, 3, 4, 5),
    data: JSON.stringify({ actor: { subject: "3f1c" }, requestId: `r-${n}`, body }),
    position: { txid: 0n, seq: BigInt(n) },
  };
}
