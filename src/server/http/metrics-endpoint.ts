import cluster from "node:cluster";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Code } from "@connectrpc/connect";
import type { Config } from "../../config.js";
import { ApiError } from "../../domain/errors.js";
import { describeSystemError, StartupError } from "../../startup-error.js";
import { DEFAULT_ERROR_DOMAIN, restErrorBody, toConnectError } from "../errors.js";
import { metricsStartupNote } from "../observe/metrics-access.js";
import { metricsTokenMatches } from "../observe/metrics-token.js";
import { bearerChallenge } from "./www-authenticate.js";

/** What a scrape reads: the exposition text and its content type. */
export interface MetricsSource {
  contentType: string;
  exposition(): Promise<string>;
}

/** A listener of its own serving only GET /metrics (PLATFORM_METRICS_ADDR). */
export interface MetricsListener {
  /** http://host:port/metrics, with the port bound. */
  url: string;
  close(): Promise<void>;
}

/**
 * Serves /metrics on its own address, so a scraper can reach it on a private
 * interface while the public port has no /metrics at all. Plain HTTP/1.1: no
 * TLS, no API, nothing but the one route, for anyone who reaches the address
 * (it is meant to be private), or with PLATFORM_METRICS_TOKEN only for that
 * bearer token (token ""). A bind failure is a StartupError naming the
 * variable.
 */
export async function listenForScrapes(
  addr: { host: string; port: number },
  token: string,
  source: MetricsSource,
): Promise<MetricsListener> {
  const server = createServer((req, res) => void answer(req, res, token, source));
  // A scrape is short; a connection left idle goes soon.
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(addr.port, addr.host, () => {
      server.off("error", reject);
      resolve();
    });
  }).catch((err: unknown) => {
    throw new StartupError(`cannot serve metrics on PLATFORM_METRICS_ADDR=${hostPort(addr.host, addr.port)}: ${describeSystemError(err)}`);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${hostPort(addr.host, port)}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/**
 * The listener of PLATFORM_METRICS_ADDR for a server process: none without
 * the setting, and none in a worker, whose primary listens there for the
 * whole cluster (workers.ts). Logs where metrics can be scraped, or that they
 * are private (a worker leaves that line to its primary, too).
 */
export async function listenForMetrics(
  config: Config,
  source: MetricsSource,
  log: { info(fields: object, msg: string): void },
): Promise<MetricsListener | undefined> {
  if (cluster.isWorker) return undefined;
  const listener = config.metricsAddr && (await listenForScrapes(config.metricsAddr, config.metricsToken, source));
  const note = metricsStartupNote(config, listener?.url);
  log.info(note.fields, note.msg);
  return listener;
}

function hostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

async function answer(req: IncomingMessage, res: ServerResponse, token: string, source: MetricsSource): Promise<void> {
  const path = (req.url ?? "/").split("?")[0];
  if (path !== "/metrics")
    return refuse(res, new ApiError(Code.NotFound, "ROUTE_NOT_FOUND", "No such route: this address serves only /metrics"));
  if (req.method !== "GET" && req.method !== "HEAD") {
    res.setHeader("allow", "GET, HEAD");
    return refuse(
      res,
      new ApiError(Code.Unimplemented, "METHOD_NOT_ALLOWED", `Method ${req.method} is not allowed here; use GET or HEAD`),
      405,
    );
  }
  if (!metricsTokenMatches(req.headers.authorization, token)) {
    res.setHeader("www-authenticate", bearerChallenge(req.headers.authorization, "metrics"));
    return refuse(
      res,
      new ApiError(Code.Unauthenticated, "UNAUTHENTICATED", "Unauthenticated: /metrics requires Authorization: Bearer <metrics token>"),
    );
  }
  let text: string;
  try {
    text = await source.exposition();
  } catch (err) {
    return refuse(
      res,
      err instanceof ApiError ? err : new ApiError(Code.Unavailable, "UNAVAILABLE", "Unavailable: metrics could not be gathered"),
    );
  }
  res.writeHead(200, { "content-type": source.contentType, "content-length": Buffer.byteLength(text) });
  res.end(req.method === "HEAD" ? undefined : text);
}

/** An error answer in the API's error shape (google.rpc.Status with one ErrorInfo). */
function refuse(res: ServerResponse, err: ApiError, status?: number): void {
  const rendered = restErrorBody(toConnectError(err, DEFAULT_ERROR_DOMAIN));
  const body = `${JSON.stringify(rendered.body)}\n`;
  res.writeHead(status ?? rendered.status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}
