import type { AddressInfo } from "node:net";
import { Code } from "@connectrpc/connect";
import type * as grpc from "@grpc/grpc-js";
import type { FastifyInstance } from "fastify";
import type { Config } from "../config.js";
import { ApiError } from "../domain/errors.js";
import { PACKAGE_VERSION } from "../package-root.js";
import type { HealthState } from "../server/grpc/health.js";
import type { OnePortServer } from "../server/http/one-port.js";
import { SPAN_FLUSH_MS, type Tracing } from "../server/observe/tracing.js";
import { systemErrorCode } from "../startup-error.js";
import type { Store, StoreDescription } from "../store/store.js";

/** HOST's default: every address, IPv6 and IPv4. */
const DUAL_STACK_HOST = "::";
/** What listening on "::" fails with where the kernel has no IPv6. */
const IPV6_UNAVAILABLE = ["EAFNOSUPPORT", "EADDRNOTAVAIL"];

/**
 * Starts listening on config's host and port and logs the one start-up line
 * (version, address, backend and its data, docs). Returns the bound port.
 */
export async function listen(app: FastifyInstance, config: Config, store: Store): Promise<number> {
  // fastify would log one "listening" line per interface; ours is the single start-up line below.
  const level = app.log.level;
  app.log.level = "warn";
  let host = config.host;
  try {
    // "::" with ipv6Only off takes IPv6 and IPv4 clients alike (IPv4 ones as ::ffff:a.b.c.d, which
    // normalizeAddress writes as a.b.c.d); where IPv6 is switched off, 0.0.0.0 still serves IPv4.
    await app.listen({ port: config.port, host, ipv6Only: false }).catch((err: unknown) => {
      if (host !== DUAL_STACK_HOST || !IPV6_UNAVAILABLE.includes(systemErrorCode(err) ?? "")) throw err;
      host = "0.0.0.0";
      return app.listen({ port: config.port, host });
    });
  } finally {
    app.log.level = level;
  }
  if (host !== config.host) app.log.warn({ host }, `IPv6 is not available here: listening on ${host} (IPv4 only)`);
  const port = (app.server.address() as AddressInfo).port;
  const facts = startupFacts({ ...config, host }, port, store.describe());
  app.log.info(facts, startupLine(facts));
  return port;
}

/** What the start-up line says, as fields: version, where it listens, the backend and its data, the docs. */
function startupFacts(config: Config, port: number, store: StoreDescription) {
  // With PORT=0 the default base URL names port 0; the address to browse is the one actually bound.
  const scheme = config.tls ? "https" : "http";
  const base = config.baseUrl === `${scheme}://localhost:${config.port}` ? `${scheme}://localhost:${port}` : config.baseUrl;
  return {
    version: PACKAGE_VERSION,
    listen: `${scheme}://${config.host.includes(":") ? `[${config.host}]` : config.host}:${port}`,
    backend: store.backend,
    data: store.location,
    docs: `${base}/docs`,
  };
}

function startupLine(f: ReturnType<typeof startupFacts>): string {
  const backend = f.backend === "postgresql" ? "PostgreSQL" : "SQLite";
  return `platform-api ${f.version} listening on ${f.listen} (REST, gRPC, Connect, gRPC-Web) · ${backend} ${f.data} · docs ${f.docs}`;
}

/** The parts a graceful stop closes, in order. */
export interface ServingParts {
  app: FastifyInstance;
  front: OnePortServer;
  grpcServer: grpc.Server;
  health: HealthState;
  store: Store;
  /** The tracer, when tracing is on: its last spans are exported after the store closed. */
  tracing?: Pick<Tracing, "shutdown">;
  /** Writes the log lines still held; called last. */
  flush: () => Promise<void> | void;
  /** What is being served now, for the line saying what the end of the grace period cut (RequestLog.inFlight). */
  inFlight?: () => { what: Record<string, number>; reqIds: string[] };
}

/**
 * A server's way from serving to stopped. close() drains first: health turns
 * NOT_SERVING (so /readyz and gRPC health tell the balancer) while calls are
 * still served for drainMs, HTTP/1.1 answers carrying `Connection: close`;
 * then the listener closes, idle connections close at once and HTTP/2 ones
 * get GOAWAY, and the calls in flight have graceMs to finish before every
 * connection left is cut. Each phase is logged.
 */
export class ServerLifecycle {
  /** The RPCs being handled, on every protocol (the wrapper's observer counts them). */
  readonly calls = new CallsInFlight();
  private draining = false;
  /** The listener has closed: a request still arriving on an open connection is refused, in the spec's shape. */
  private stopping = false;
  private closing: Promise<void> | undefined;
  private closed = false;
  private endDrain: (() => void) | undefined;

  constructor(private readonly timing: { drainMs: number; graceMs: number }) {}

  /**
   * Marks every HTTP/1.1 answer given once the drain has begun with
   * `Connection: close`, so a keep-alive connection closes after its answer
   * instead of idling into the listener's close. HTTP/2 has GOAWAY instead.
   */
  install(app: FastifyInstance): void {
    app.addHook("onRequest", (req, reply, done) => {
      if (this.draining && req.raw.httpVersionMajor === 1) reply.raw.setHeader("connection", "close");
      // Once the listener is closed, a request still arriving on an open connection (pipelined, or sent as its
      // idle close crossed it) gets UNAVAILABLE to retry elsewhere, rendered like every other error.
      if (this.stopping) return done(new ApiError(Code.Unavailable, "SHUTTING_DOWN", "The server is shutting down: retry the call"));
      done();
    });
  }

  /**
   * Drains and stops; resolves once the store has closed. A second call while
   * draining (a second SIGTERM or Ctrl-C) ends the drain at once and goes on
   * to the close; any call returns the same promise.
   */
  close(parts: ServingParts): Promise<void> {
    if (this.closing !== undefined) {
      // A second stop (Ctrl-C, SIGTERM, the primary's close-now) is logged whatever phase it finds.
      if (this.endDrain) this.endDrain();
      else if (!this.closed)
        parts.app.log.info(
          { callsInFlight: this.calls.count },
          "second stop request: the drain is over already; calls still running are cut at the end of the grace period",
        );
      return this.closing;
    }
    this.closing = this.drainThenClose(parts)
      .finally(() => (this.closed = true))
      .finally(parts.flush);
    return this.closing;
  }

  private async drainThenClose(parts: ServingParts): Promise<void> {
    const { app, health } = parts;
    const { drainMs, graceMs } = this.timing;
    const started = Date.now();
    this.draining = true;
    health.shutdown();
    app.log.info(
      { drainMs, graceMs, callsInFlight: this.calls.count },
      `draining: health answers NOT_SERVING; calls are served ${drainMs} ms more, then the listener closes`,
    );
    if (drainMs > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, drainMs);
        this.endDrain = () => {
          clearTimeout(timer);
          app.log.info(
            { drainedMs: Date.now() - started, callsInFlight: this.calls.count },
            "drain cut short by a second stop request: closing now",
          );
          resolve();
        };
      });
      this.endDrain = undefined;
    }
    await this.closeConnections(parts);
    await parts.store.close();
    if (parts.tracing && !(await parts.tracing.shutdown(SPAN_FLUSH_MS)))
      app.log.warn({ boundMs: SPAN_FLUSH_MS }, `spans not exported within ${SPAN_FLUSH_MS} ms were dropped`);
    app.log.info({ durationMs: Date.now() - started }, "platform-api stopped");
  }

  /** Stops accepting, lets the calls in flight finish within the grace period, and closes every connection. */
  private async closeConnections({ app, front, grpcServer, inFlight }: ServingParts): Promise<void> {
    const { graceMs } = this.timing;
    const closeStarted = Date.now();
    this.stopping = true;
    let callsCut = -1;
    let cut: ReturnType<NonNullable<ServingParts["inFlight"]>> | undefined;
    // Every accepted connection, HTTP/1.1 and HTTP/2 alike, has closed.
    const connectionsClosed = new Promise<void>((resolve) => front.close(() => resolve()));
    // fastify finds the listener closed already; it still runs its onClose hooks and answers a request racing the close with 503.
    const appClosed = app.close();
    app.log.info({ callsInFlight: this.calls.count, graceMs }, "listener closed");
    // grpc-js calls back once each of its sessions has closed, but never for a session already destroyed (its client
    // went away) whose 'close' had not yet been emitted when tryShutdown began: with every connection closed, there is
    // nothing left for it to wait for.
    const grpcDone = Promise.race([
      new Promise<void>((resolve) => grpcServer.tryShutdown(() => resolve())),
      connectionsClosed.then(() => new Promise<void>((resolve) => setImmediate(resolve))),
    ]);
    // GOAWAY after tryShutdown has begun, so grpcDone waits for the calls in flight.
    front.drainGrpc(graceMs);
    // A keep-alive connection the client stopped using has nothing to finish: it would otherwise hold the close until its
    // idle timeout. One in use carries its next request, answered SHUTTING_DOWN with Connection: close (idle-close.ts).
    front.closeIdleConnections();
    const graceOver = setTimeout(() => {
      callsCut = this.calls.count;
      // Read before the connections go: what each cut call or request was.
      cut = inFlight?.();
      grpcServer.forceShutdown();
      front.closeAllConnections();
    }, graceMs);
    await Promise.all([connectionsClosed, appClosed, grpcDone]);
    clearTimeout(graceOver);
    if (callsCut < 0) app.log.info({ durationMs: Date.now() - closeStarted }, "connections drained");
    else app.log.warn({ callsCut, graceMs, ...cut }, `grace period over: connections closed, ${callsCut} calls cut`);
    // A call whose client went away has no connection left to wait for, but its
    // handler may still be writing: the store closes after it (or the grace).
    await this.calls.settled(closeStarted + graceMs - Date.now());
  }
}

/** How many calls are being handled, and a wait for none. */
export class CallsInFlight {
  private running = 0;
  private waiters: (() => void)[] = [];

  /** How many calls are being handled now. */
  get count(): number {
    return this.running;
  }

  started(): void {
    this.running++;
  }

  finished(): void {
    if (--this.running > 0) return;
    for (const wake of this.waiters.splice(0)) wake();
  }

  /** Resolves when no call is running, or after ms. */
  settled(ms: number): Promise<void> {
    if (this.running <= 0 || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
