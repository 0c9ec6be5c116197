import { availableParallelism } from "node:os";
import { resolve } from "node:path";

/** The server's configuration, read once at start from the environment. */
export interface Config {
  /** TCP port of the one listener; 0 picks a free port. */
  port: number;
  /** Interface to listen on. */
  host: string;
  /** Directory of the SQLite database and its WAL (unused with a database URL). */
  dataDir: string;
  /**
   * PostgreSQL connection URL (PLATFORM_DATABASE_URL, postgres://…); "" keeps
   * the embedded SQLite store in dataDir.
   */
  databaseUrl: string;
  /** The API's own address: the audience of the tokens it issues. */
  baseUrl: string;
  /** The token-issuing address (issuer of API tokens; serves /sts/exchange). */
  authUrl: string;
  /** pino level: fatal, error, warn, info, debug, trace or silent. */
  logLevel: string;
  /** How long shutdown waits for in-flight calls before closing connections. */
  shutdownGraceMs: number;
  /** Issuers whose ID tokens sign people in (PLATFORM_USER_ISSUERS). */
  userIssuers: string[];
  /** Audiences a sign-in ID token must carry one of (PLATFORM_USER_AUDIENCES; default: the auth URL). */
  userAudiences: string[];
  /** Browser origins allowed to call the API (PLATFORM_CORS_ORIGINS; "*" for any; default none). */
  corsOrigins: string[];
  /**
   * Largest request message accepted on every protocol, counted after
   * decompression (PLATFORM_MAX_MESSAGE_BYTES; default 4 MiB).
   */
  maxMessageBytes: number;
  /**
   * Development and tests only: issuers that users supply (identity claim
   * matches, identity providers) may be http or https on a loopback address
   * (PLATFORM_ALLOW_LOOPBACK_ISSUERS; default false).
   */
  allowLoopbackIssuers: boolean;
  /** When set, GET /metrics requires Authorization: Bearer <this> (PLATFORM_METRICS_TOKEN). */
  metricsToken: string;
  /**
   * Start even when the data directory or database is group- or
   * world-accessible, for operators who manage permissions themselves
   * (PLATFORM_SKIP_PERMISSION_CHECK; default false).
   */
  skipPermissionCheck: boolean;
  /**
   * How long an idle HTTP/1.1 keep-alive connection stays open
   * (PLATFORM_KEEP_ALIVE_TIMEOUT_MS; default 65 s). Behind a load balancer it
   * must outlive the balancer's own idle timeout (AWS ALB: 60 s), or the
   * balancer reuses a connection the server is closing and answers 502.
   */
  keepAliveTimeoutMs: number;
  /** An HTTP/2 connection with no stream open this long is closed (PLATFORM_HTTP2_IDLE_TIMEOUT_MS; default 5 minutes). */
  http2IdleTimeoutMs: number;
  /** Worker processes serving the one port (PLATFORM_WORKERS: a number, or "auto" for one per core; default 1). */
  workers: number;
}

/** Every environment variable the server reads, with its default: `serve --help` prints them (README has the same table). */
export const ENVIRONMENT_VARIABLES: readonly { name: string; default: string; meaning: string }[] = [
  { name: "PORT", default: "8080", meaning: "the one TCP port for every protocol (0 picks a free one)" },
  { name: "HOST", default: "0.0.0.0", meaning: "interface to listen on" },
  { name: "PLATFORM_DATA_DIR", default: "./data", meaning: "directory of the SQLite database (platform.db); created if missing" },
  { name: "PLATFORM_DATABASE_URL", default: "none", meaning: "postgres://…: store everything in PostgreSQL instead of SQLite" },
  { name: "PLATFORM_BASE_URL", default: "http://localhost:<PORT>", meaning: "the API's own address (audience of issued tokens)" },
  { name: "PLATFORM_AUTH_URL", default: "the base URL", meaning: "issuer of API tokens; serves discovery, JWKS and /sts/exchange" },
  { name: "PLATFORM_USER_ISSUERS", default: "none", meaning: "comma-separated OIDC issuers whose ID tokens sign people in" },
  { name: "PLATFORM_USER_AUDIENCES", default: "the auth URL", meaning: "audiences a sign-in ID token must carry one of" },
  { name: "PLATFORM_CORS_ORIGINS", default: "none", meaning: "comma-separated browser origins allowed to call the API (* for any)" },
  { name: "LOG_LEVEL", default: "info", meaning: "fatal, error, warn, info, debug, trace or silent" },
  { name: "PLATFORM_SHUTDOWN_GRACE_MS", default: "10000", meaning: "how long SIGTERM/SIGINT waits for calls in flight" },
  { name: "PLATFORM_MAX_MESSAGE_BYTES", default: "4194304", meaning: "largest request message on every protocol, after decompression" },
  { name: "PLATFORM_ALLOW_LOOPBACK_ISSUERS", default: "false", meaning: "development and tests: allow issuers on loopback" },
  { name: "PLATFORM_METRICS_TOKEN", default: "none", meaning: "when set, GET /metrics requires Authorization: Bearer <it>" },
  { name: "PLATFORM_KEEP_ALIVE_TIMEOUT_MS", default: "65000", meaning: "idle HTTP/1.1 keep-alive timeout (above your load balancer's)" },
  { name: "PLATFORM_HTTP2_IDLE_TIMEOUT_MS", default: "300000", meaning: "an HTTP/2 connection with no open stream is closed after this" },
  { name: "PLATFORM_WORKERS", default: "1", meaning: "worker processes serving the one port (auto: one per core)" },
  { name: "PLATFORM_SKIP_PERMISSION_CHECK", default: "false", meaning: "start even when the data directory is group- or world-accessible" },
];

/** The variables as aligned lines for a help text. */
export function environmentHelp(): string {
  const width = Math.max(...ENVIRONMENT_VARIABLES.map((v) => `${v.name}=${v.default}`.length));
  return ENVIRONMENT_VARIABLES.map((v) => `  ${`${v.name}=${v.default}`.padEnd(width)}  ${v.meaning}`).join("\n");
}

/** Thrown when the environment holds invalid settings; lists every problem. */
export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "ConfigError";
  }
}

const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number, problems: string[]): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    problems.push(`${name}=${raw}: must be an integer from ${min} to ${max}`);
    return fallback;
  }
  return n;
}

function url(env: NodeJS.ProcessEnv, name: string, fallback: string, problems: string[]): string {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  try {
    const u = new URL(raw);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new Error("scheme");
    return raw.replace(/\/+$/, "");
  } catch {
    problems.push(`${name}=${raw}: must be an absolute http(s) URL`);
    return fallback;
  }
}

function boolean(env: NodeJS.ProcessEnv, name: string, problems: string[]): boolean {
  const raw = env[name];
  if (raw === undefined || raw === "" || raw === "false" || raw === "0") return false;
  if (raw === "true" || raw === "1") return true;
  problems.push(`${name}=${raw}: must be true or false`);
  return false;
}

/** A comma-separated list, blanks dropped. */
function list(raw: string | undefined): string[] {
  return (raw ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
}

/** Reads and validates the configuration; throws ConfigError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const problems: string[] = [];
  const port = integer(env, "PORT", 8080, 0, 65535, problems);
  const baseUrl = url(env, "PLATFORM_BASE_URL", `http://localhost:${port}`, problems);
  const logLevel = env.LOG_LEVEL ?? "info";
  if (!LOG_LEVELS.includes(logLevel)) problems.push(`LOG_LEVEL=${logLevel}: must be one of ${LOG_LEVELS.join(", ")}`);
  const authUrl = url(env, "PLATFORM_AUTH_URL", baseUrl, problems);
  const userIssuers = list(env.PLATFORM_USER_ISSUERS);
  for (const issuer of userIssuers) {
    if (!/^https?:\/\/[^\s]+$/.test(issuer)) problems.push(`PLATFORM_USER_ISSUERS: ${issuer} is not an http(s) URL`);
  }
  const databaseUrl = env.PLATFORM_DATABASE_URL ?? "";
  if (databaseUrl !== "" && !/^postgres(ql)?:\/\/\S+$/.test(databaseUrl))
    problems.push("PLATFORM_DATABASE_URL: must be a postgres:// or postgresql:// URL");
  const userAudiences = list(env.PLATFORM_USER_AUDIENCES);
  const corsOrigins = list(env.PLATFORM_CORS_ORIGINS);
  for (const origin of corsOrigins) {
    if (origin !== "*" && !/^https?:\/\/[^/\s]+$/.test(origin))
      problems.push(`PLATFORM_CORS_ORIGINS: ${origin} is not an origin like https://app.example.com (or *)`);
  }
  const config: Config = {
    port,
    host: env.HOST ?? "0.0.0.0",
    dataDir: resolve(env.PLATFORM_DATA_DIR ?? "./data"),
    databaseUrl,
    baseUrl,
    authUrl,
    logLevel,
    shutdownGraceMs: integer(env, "PLATFORM_SHUTDOWN_GRACE_MS", 10_000, 0, 600_000, problems),
    userIssuers,
    userAudiences: userAudiences.length > 0 ? userAudiences : [authUrl],
    corsOrigins,
    maxMessageBytes: integer(env, "PLATFORM_MAX_MESSAGE_BYTES", 4 * 1024 * 1024, 1024, 64 * 1024 * 1024, problems),
    allowLoopbackIssuers: boolean(env, "PLATFORM_ALLOW_LOOPBACK_ISSUERS", problems),
    metricsToken: env.PLATFORM_METRICS_TOKEN ?? "",
    skipPermissionCheck: boolean(env, "PLATFORM_SKIP_PERMISSION_CHECK", problems),
    keepAliveTimeoutMs: integer(env, "PLATFORM_KEEP_ALIVE_TIMEOUT_MS", 65_000, 1_000, 3_600_000, problems),
    http2IdleTimeoutMs: integer(env, "PLATFORM_HTTP2_IDLE_TIMEOUT_MS", 300_000, 1_000, 86_400_000, problems),
    workers: env.PLATFORM_WORKERS === "auto" ? availableParallelism() : integer(env, "PLATFORM_WORKERS", 1, 1, 256, problems),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}
