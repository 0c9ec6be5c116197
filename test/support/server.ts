import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startServer, type RunningServer, type ServerOptions } from "../../src/app/start.js";
import { loadConfig } from "../../src/config.js";
import { openStore } from "../../src/store/open.js";
import type { Store } from "../../src/store/store.js";
import { freshPgDatabase } from "./pg-cluster.js";

/**
 * The store engine of the end-to-end suites: SQLite by default;
 * PLATFORM_TEST_BACKEND=postgres runs them on PostgreSQL, each server on a
 * fresh database of a throwaway cluster.
 */
export const TEST_BACKEND = process.env.PLATFORM_TEST_BACKEND === "postgres" ? "postgres" : "sqlite";

/** Where a test server keeps its data, and how to open a second connection to it. */
export interface TestStorage {
  /** The SQLite directory (unused on PostgreSQL, but always a fresh directory). */
  dataDir: string;
  /** The PostgreSQL database's URL, "" on SQLite. */
  databaseUrl: string;
  /** Another store on the same data, as a second process would open it. */
  openStore(): Promise<Store>;
}

/** Fresh storage on the suite's engine (or the one named). */
export async function freshStorage(
  dataDir = mkdtempSync(join(tmpdir(), "platform-test-")),
  backend = TEST_BACKEND,
  existingDatabaseUrl?: string,
): Promise<TestStorage> {
  const databaseUrl = existingDatabaseUrl ?? (backend === "postgres" ? await freshPgDatabase() : "");
  return {
    dataDir,
    databaseUrl,
    // As `serve` opens it: on SQLite, the WAL checkpointed by a thread (a failure of which fails the test run).
    openStore: () =>
      openStore({
        databaseUrl,
        dataDir,
        maxConnections: 4,
        backgroundCheckpoints: {
          onError: (err) => {
            throw err;
          },
        },
      }),
  };
}

/** A real server on a real port with its own storage. */
export interface TestServer extends TestStorage {
  url: string;
  port: number;
  server: RunningServer;
  /** An API token of the built-in administrator, used by default by rest(), grpcClient() and testTransport(). */
  adminToken: string;
  close(): Promise<void>;
}

/** Default bearer tokens by port, so tests that are not about authentication act as the administrator. */
const defaultTokens = new Map<number, string>();

/** Makes token the default bearer token of every helper call to port. */
export function setDefaultToken(port: number, token: string): void {
  defaultTokens.set(port, token);
}

/** The default bearer token for a base URL or port, if any. */
export function defaultToken(target: string | number): string | undefined {
  return defaultTokens.get(typeof target === "number" ? target : Number(new URL(target).port));
}

/** Mints an administrator token on a running server. */
export async function mintAdminToken(server: RunningServer): Promise<string> {
  return (await server.tokens.mint(server.adminSubject)).token;
}

/** Starts the real server on port 0 over a fresh data directory. */
export async function startTestServer(
  opts: {
    env?: Record<string, string>;
    now?: () => number;
    timeouts?: ServerOptions["timeouts"];
    dataDir?: string;
    /** The engine, when a suite needs one (e.g. it reads SQLite's file itself). */
    backend?: "sqlite" | "postgres";
    /** An existing PostgreSQL database to serve instead of a fresh one (a migrated deployment). */
    databaseUrl?: string;
    /** Wraps the opened store (tests inject failures into it). */
    decorateStore?: (store: Store) => Store;
    /** Where the server's log lines go (tests read them; set env.LOG_LEVEL too). */
    logStream?: ServerOptions["logStream"];
    /** Wraps the bearer-token authenticator (tests hold calls in flight). */
    decorateAuthenticator?: ServerOptions["decorateAuthenticator"];
  } = {},
): Promise<TestServer> {
  const storage = await freshStorage(opts.dataDir, opts.backend, opts.databaseUrl);
  const { dataDir } = storage;
  const config = loadConfig({
    PORT: "0",
    HOST: "127.0.0.1",
    PLATFORM_DATA_DIR: dataDir,
    LOG_LEVEL: "silent",
    PLATFORM_SHUTDOWN_GRACE_MS: "2000",
    // No drain: close() goes straight to closing the listener (test/operations/drain.test.ts sets one).
    PLATFORM_DRAIN_MS: "0",
    // The test issuers (test/support/oidc-issuer.ts) listen on http://127.0.0.1.
    PLATFORM_ALLOW_LOOPBACK_ISSUERS: "true",
    ...opts.env,
  });
  const opened = await storage.openStore();
  const store = opts.decorateStore?.(opened) ?? opened;
  const server = await startServer({
    config,
    store,
    now: opts.now,
    timeouts: opts.timeouts,
    logStream: opts.logStream,
    decorateAuthenticator: opts.decorateAuthenticator,
  });
  const adminToken = await mintAdminToken(server);
  setDefaultToken(server.port, adminToken);
  return {
    ...storage,
    url: server.url,
    port: server.port,
    server,
    adminToken,
    async close() {
      defaultTokens.delete(server.port);
      await server.close();
      if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A REST response as a test reads it. */
export interface RestResult {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  body: any;
  headers: Headers;
}

/**
 * Calls the REST API with fetch, JSON in and out. Sends the port's default
 * token unless headers carry an authorization header ("" sends none).
 */
export async function rest(
  baseUrl: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<RestResult> {
  const h: Record<string, string> = { ...headers };
  const auth = Object.keys(h).find((k) => k.toLowerCase() === "authorization");
  if (auth === undefined) {
    const token = defaultToken(baseUrl);
    if (token) h.authorization = `Bearer ${token}`;
  } else if (h[auth] === "") {
    delete h[auth];
  }
  const res = await fetch(baseUrl + path, {
    method,
    headers: body === undefined ? h : { "content-type": "application/json", ...h },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text === "" ? undefined : JSON.parse(text);
  } catch {
    // leave as text
  }
  return { status: res.status, body: parsed, headers: res.headers };
}

/** Creates a group over REST and returns its JSON; fails the test on error. */
export async function createGroup(
  baseUrl: string,
  parent: string | null,
  name: string,
  description = "",
): Promise<{ uid: string; name: string; createTime: string; updateTime: string; description: string }> {
  const res = await rest(baseUrl, "POST", `/iam/v2beta1/groups${parent ? `/${parent}` : ""}`, { name, description });
  if (res.status !== 200) throw new Error(`create group failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}
