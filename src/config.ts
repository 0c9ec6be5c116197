import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join, resolve, sep } from "node:path";
import { canonicalIssuer } from "./domain/issuer.js";
import { trustedProxyProblems } from "./domain/trusted-proxies.js";
import { PACKAGE_ROOT } from "./package-root.js";

/** The server's configuration, read once at start from the environment. */
export interface Config {
  /** TCP port of the one listener; 0 picks a free port. */
  port: number;
  /** Address to listen on (HOST; default "::": every IPv6 and IPv4 address, or 0.0.0.0 where the kernel has no IPv6). */
  host: string;
  /** Directory of the SQLite database and its WAL (unused with a database URL). */
  dataDir: string;
  /**
   * PostgreSQL connection URL (PLATFORM_DATABASE_URL, postgres://…); "" keeps
   * the embedded SQLite store in dataDir.
   */
  databaseUrl: string;
  /** The API's own address: the audience of the tokens it issues (default http://localhost:<port>, https:// with TLS). */
  baseUrl: string;
  /**
   * The one port serves TLS with this certificate chain and key (PEM files;
   * PLATFORM_TLS_CERT_FILE and PLATFORM_TLS_KEY_FILE, both or neither;
   * default none: plaintext). Re-read on SIGHUP and when the files change.
   */
  tls?: { certFile: string; keyFile: string };
  /** The token-issuing address (issuer of API tokens; serves /sts/exchange). */
  authUrl: string;
  /** pino level: fatal, error, warn, info, debug, trace or silent. */
  logLevel: string;
  /** How long shutdown waits for in-flight calls before closing connections. */
  shutdownGraceMs: number;
  /**
   * How long, after SIGTERM, /readyz and gRPC health answer NOT_SERVING while
   * calls are still served, before the listener closes: the time a balancer
   * needs to notice (its check interval times the failures it waits for).
   */
  drainMs: number;
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
   * Largest request message of a method that needs no token (token
   * exchange, health), on every protocol (PLATFORM_MAX_ANONYMOUS_MESSAGE_BYTES;
   * default 64 KiB). The body of any other method is read only once its
   * caller is authenticated, so this is all an anonymous request can make the
   * server hold and decode; an exchange request is a few hundred bytes.
   */
  anonymousMessageBytes: number;
  /**
   * A unary Connect or gRPC-Web request body still arriving this long after
   * it started is dropped with its connection (PLATFORM_REQUEST_BODY_TIMEOUT_MS;
   * default 30 s: a 4 MiB message at 1.2 Mbit/s), instead of being held until
   * the listener's request timeout (2 minutes).
   */
  requestBodyTimeoutMs: number;
  /**
   * Development and tests only: issuers that users supply (identity claim
   * matches, identity providers) may be http or https on a loopback address
   * (PLATFORM_ALLOW_LOOPBACK_ISSUERS; default false).
   */
  allowLoopbackIssuers: boolean;
  /**
   * Upstream issuer fetches (discovery, JWKS), shared fairly because org
   * owners choose the issuers: `max` in flight (PLATFORM_ISSUER_FETCHES;
   * default 16), `reserved` of them only for the operator's issuers and
   * issuers that answered before (PLATFORM_ISSUER_FETCHES_RESERVED; default
   * 8), `perTenant` for one organization (PLATFORM_ISSUER_FETCHES_PER_TENANT;
   * default 2), and a never-seen issuer's timeout
   * (PLATFORM_ISSUER_NEW_TIMEOUT_MS; default 2 s; known issuers get 5 s).
   */
  issuerFetches: { max: number; reserved: number; perTenant: number; newIssuerTimeoutMs: number };
  /**
   * Root organizations one identity may have created and not deleted
   * (PLATFORM_MAX_ORGS_PER_IDENTITY; default 100; the administrator is
   * exempt). Anyone signed in may create an organization; past this a create
   * is RESOURCE_EXHAUSTED. A person or a team's automation needs a handful;
   * 100 keeps the tops one identity can make for itself (each is an index
   * seek in every List it sends) two orders of magnitude below where they
   * used to cost seconds.
   */
  maxOrgsPerIdentity: number;
  /**
   * Calls per second one identity may make to each process, sustained
   * (PLATFORM_CALLS_PER_IDENTITY; default 1,000; 0 turns the limit off; the
   * administrator is exempt), with bursts of twice that after a quiet spell.
   * Past it a call is RESOURCE_EXHAUSTED (HTTP 429, RATE_LIMITED) with
   * RetryInfo and Retry-After, before any store work. Every call is bounded on
   * its own; this bounds how many of them one tenant's identity can make, so
   * a tenant calling as fast as it can leaves the CPU to the others.
   */
  callsPerIdentity: number;
  /**
   * How long events are kept in the change feed (PLATFORM_EVENT_RETENTION;
   * default 30 days, written as 30d, 12h, 90m or 3600s): older ones are
   * pruned in small batches, and a cursor before them is EVENT_CURSOR_EXPIRED.
   */
  eventRetentionMs: number;
  /**
   * Refresh tokens issued at people's sign-in: each token works until it has
   * been idle for refreshIdleMs (PLATFORM_REFRESH_TOKEN_IDLE; default 7 days),
   * and no token of a sign-in works after refreshMaxAgeMs from that sign-in
   * (PLATFORM_REFRESH_TOKEN_LIFETIME; default 30 days): the person signs in
   * again. docs/authentication.md.
   */
  refresh: { idleMs: number; maxAgeMs: number };
  /**
   * WatchEvents' bounds: a stream ends (OK, the client resumes from its last
   * cursor) after maxStreamMs (PLATFORM_EVENT_WATCH_MAX_MS, 1 h); a caught-up
   * stream reads the feed for other processes' commits every pollMs
   * (PLATFORM_EVENT_WATCH_POLL_MS, 1 s; this process's own commits wake it at
   * once); a stream that sent nothing for heartbeatMs sends a heartbeat
   * (PLATFORM_EVENT_WATCH_HEARTBEAT_MS, 15 s: below every shipped proxy's and
   * common balancers' 60 s idle timeout, four chances before it); perIdentity
   * streams per identity (PLATFORM_EVENT_WATCHES_PER_IDENTITY, 8),
   * perOrganization per organization, all its identities together
   * (PLATFORM_EVENT_WATCHES_PER_ORG, 100: a tenth of the process, so one
   * organization never takes it all), and total streams
   * (PLATFORM_EVENT_WATCHES, 1,000) per process.
   */
  eventWatch: { maxStreamMs: number; pollMs: number; heartbeatMs: number; perIdentity: number; perOrganization: number; total: number };
  /**
   * Subscription deliveries (src/delivery/deliverer.ts): whether this process
   * delivers at all (PLATFORM_DELIVERIES, on; off leaves delivering to the
   * other processes sharing the database), subscriptions it delivers at once
   * (PLATFORM_DELIVERY_CONCURRENCY, 16), how long a process's claim on a
   * subscription outlives its last sign of life (PLATFORM_DELIVERY_LEASE_MS,
   * 60 s: a killed process's deliveries resume elsewhere after it), and how
   * often it looks for due subscriptions when no commit of its own woke it
   * (PLATFORM_DELIVERY_POLL_MS, 1 s).
   */
  deliveries: { enabled: boolean; concurrency: number; leaseMs: number; pollMs: number };
  /**
   * Subscriptions one organization (its whole tree) may have
   * (PLATFORM_MAX_SUBSCRIPTIONS_PER_ORG, 25): each is a delivery loop that
   * reads the feed after every commit, and deliverers serve the subscriptions
   * waiting longest first, so the bound keeps one tenant from taking the
   * delivery capacity every other tenant shares.
   */
  maxSubscriptionsPerOrg: number;
  /**
   * When set, GET /metrics requires Authorization: Bearer <this>, on the
   * public port and on PLATFORM_METRICS_ADDR alike (PLATFORM_METRICS_TOKEN).
   */
  metricsToken: string;
  /**
   * Serve /metrics on the public port to anyone, without a token
   * (PLATFORM_METRICS_PUBLIC; default off: with neither a token nor
   * PLATFORM_METRICS_ADDR, the public port refuses every scrape). See
   * src/server/observe/metrics-access.ts.
   */
  metricsPublic: boolean;
  /**
   * The registry token service (docs/registry.md): the `service` a registry
   * names in its token requests and our tokens' audience
   * (PLATFORM_REGISTRY_SERVICE), and the tokens' issuer
   * (PLATFORM_REGISTRY_ISSUER), both as the registry's `auth.token` says.
   */
  registry: { service: string; issuer: string };
  /**
   * The bearer secret the registry's notifications endpoint config sends
   * (PLATFORM_REGISTRY_NOTIFY_SECRET); "" (unset): POST
   * /registry/notifications is not served (404). docs/registry-catalogue.md.
   */
  registryNotifySecret: string;
  /**
   * Where /metrics is served instead of the public port (PLATFORM_METRICS_ADDR,
   * host:port; default none: on the public port, if the token or
   * PLATFORM_METRICS_PUBLIC allows). Anonymous there unless
   * PLATFORM_METRICS_TOKEN is set. With workers, the primary process listens
   * there and serves the whole cluster's view.
   */
  metricsAddr?: { host: string; port: number };
  /** PostgreSQL connections each process keeps at most (PLATFORM_DATABASE_POOL_SIZE; default 10). */
  databasePoolSize: number;
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
  /**
   * Open connections per process, every protocol (PLATFORM_MAX_CONNECTIONS;
   * default "auto": the open-file limit less 128 descriptors kept for the
   * store, outbound fetches and logs, at most 10,000). Past it a new
   * connection is reset before anything is read.
   */
  maxConnections: number;
  /**
   * Open connections per process from one client address, an IPv6 /64
   * counting as one (PLATFORM_MAX_CONNECTIONS_PER_ADDRESS; default 256).
   * Connections from a trusted proxy (trustedProxies) are exempt: they carry many clients.
   */
  maxConnectionsPerAddress: number;
  /**
   * Reverse proxies believed about their clients (PLATFORM_TRUSTED_PROXIES:
   * comma-separated CIDR ranges or addresses, IPv4 and IPv6; default none).
   * Only from these peers does the client address come from the forwarding
   * header (forwardedHeader; the rightmost hop not in the list), and a PROXY header
   * is accepted; their connections count only in the connection total, not
   * per address. Every per-address limit and the log line use that address.
   */
  trustedProxies: string[];
  /**
   * Every connection starts with a PROXY protocol v1 or v2 header (HAProxy
   * send-proxy, nginx stream proxy_protocol, AWS NLB), whose client address
   * becomes the connection's; a connection without one is closed
   * (PLATFORM_PROXY_PROTOCOL: on or off; default off).
   */
  proxyProtocol: boolean;
  /**
   * The one forwarding header the trusted proxies write, the only one read
   * (PLATFORM_FORWARDED_HEADER: x-forwarded-for or forwarded; default
   * x-forwarded-for). A proxy passes the other through as the client wrote
   * it, so reading whichever is present would let the client choose.
   */
  forwardedHeader: "x-forwarded-for" | "forwarded";
  /**
   * What the read caches keep of answers (records, list pages), in bytes of
   * their JSON text (PLATFORM_CACHE_BYTES; default 16 MiB). Per process.
   */
  cacheBytes: number;
  /**
   * Bytes of native-gRPC request messages still arriving that the process
   * holds at most, over every connection (PLATFORM_MAX_PENDING_REQUEST_BYTES;
   * default max(64 MiB, 16 × PLATFORM_MAX_MESSAGE_BYTES)). grpc-js reads a
   * whole message before the caller is authenticated; past this a stream is
   * refused RESOURCE_EXHAUSTED (SERVER_BUDGET_EXCEEDED). Per worker process.
   */
  pendingRequestBytes: number;
  /**
   * Of those, what connections from one client address may hold
   * (PLATFORM_MAX_PENDING_REQUEST_BYTES_PER_ADDRESS; default a quarter of the
   * total, so one address cannot take it all). Behind a reverse proxy raise it to the total.
   */
  pendingRequestBytesPerAddress: number;
  /**
   * A grpc.health.v1 Health/Watch stream ends (status OK; the client watches
   * again) after this long, so that no unauthenticated stream holds its
   * connection open for ever (PLATFORM_HEALTH_WATCH_MAX_MS; default 30 minutes).
   */
  healthWatchMaxMs: number;
  /**
   * An HTTP/2 (gRPC) connection this old gets GOAWAY; its calls then have the
   * HTTP/2 idle timeout to finish (PLATFORM_HTTP2_MAX_CONNECTION_AGE_MS;
   * default 1 hour). Clients reconnect on their own; load spreads again.
   */
  http2MaxConnectionAgeMs: number;
  /**
   * The operator's upstream OpenID providers people sign in at, read at
   * start from the JSON file PLATFORM_SIGN_IN_PROVIDERS_FILE (default none:
   * only organizations' own identity providers). docs/sign-in.md.
   */
  signInProviders: SignInProvider[];
  /**
   * Sign-ins one client address (an IPv6 /64 as one) may have pending at once
   * (PLATFORM_SIGN_IN_PENDING_PER_ADDRESS; default 20): each is a stored
   * flow that lives 10 minutes unless finished; past it, a new one is refused.
   */
  signInPendingPerAddress: number;
}

/** An upstream OpenID provider the operator configured for people to sign in at (PLATFORM_SIGN_IN_PROVIDERS_FILE). */
export interface SignInProvider {
  /** Short stable name, in URLs (`provider=dex`) and in flows (`op:dex`). */
  id: string;
  /** What the sign-in page shows ("Sign in with …"). */
  name: string;
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Scopes asked for besides openid (default email and profile). */
  scopes: string[];
}

/** File descriptors kept free of connections, for the store, outbound issuer fetches, logs and the workers' IPC. */
const RESERVED_FILE_DESCRIPTORS = 128;
/** The total when the descriptor limit is higher still: about 0.5–1 GiB of idle HTTP/2 sessions and buffers. */
const MAX_DEFAULT_CONNECTIONS = 10_000;
/**
 * Per address by default: well above what one client needs (a browser opens
 * six, a gRPC channel one, a NAT of a few dozen people some tens), and a
 * small share of the total so that one address cannot hold the port.
 * A connection from a trusted proxy (PLATFORM_TRUSTED_PROXIES) is not
 * counted per address: it carries many clients.
 */
export const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 256;

/**
 * The process's open-file limit (Node raises the soft limit to the hard one
 * at start), read from /proc on Linux; 1024, the usual soft limit, elsewhere.
 */
function openFileLimit(): number {
  try {
    const line = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync("/proc/self/limits", "utf8"));
    if (line) return line[1] === "unlimited" ? Number.MAX_SAFE_INTEGER : Number(line[1]);
  } catch {
    // not Linux: fall through
  }
  return 1024;
}

/**
 * The default total: every descriptor but the reserved ones, at most
 * MAX_DEFAULT_CONNECTIONS. At the common 1,024 limit that is 896, so a full
 * house of connections still leaves the store its files and sockets (the
 * issue's attack failed legitimate requests by using every descriptor).
 */
export function defaultMaxConnections(fileLimit = openFileLimit()): number {
  return Math.max(1, Math.min(MAX_DEFAULT_CONNECTIONS, fileLimit - RESERVED_FILE_DESCRIPTORS));
}

/**
 * The smallest process-wide budget by default, and how many of the largest
 * messages it holds when that is more: four connections' full budgets
 * (16 MiB each) at the default 4 MiB message limit, and sixteen uploads of
 * the largest message at once above it. An IAM API's messages are mostly
 * under a kilobyte and a message is counted only while it is arriving, so
 * legitimate traffic stays far below; an attacker's share is bounded memory.
 */
const MIN_DEFAULT_PENDING_REQUEST_BYTES = 64 * 1024 * 1024;
const DEFAULT_PENDING_REQUEST_MESSAGES = 16;
/** One address may hold a quarter of the total by default: one connection's budget, so filling the process takes four addresses. */
const DEFAULT_PENDING_ADDRESS_SHARE = 4;

/** The default process-wide budget for a message limit: max(64 MiB, 16 × the limit). */
export function defaultPendingRequestBytes(maxMessageBytes: number): number {
  return Math.max(MIN_DEFAULT_PENDING_REQUEST_BYTES, DEFAULT_PENDING_REQUEST_MESSAGES * maxMessageBytes);
}

/** The default share of one address: a quarter of the total. */
export function defaultPendingRequestBytesPerAddress(total: number): number {
  return Math.floor(total / DEFAULT_PENDING_ADDRESS_SHARE);
}

/** Every environment variable the server reads, with its default: `serve --help` prints them (docs/configuration.md has the same table, checked by test/docs/docs-reference.test.ts). */
export const ENVIRONMENT_VARIABLES: readonly { name: string; default: string; meaning: string }[] = [
  { name: "PORT", default: "8080", meaning: "the one TCP port for every protocol (0 picks a free one)" },
  { name: "HOST", default: "::", meaning: "address to listen on; :: is every IPv6 and IPv4 address (0.0.0.0: IPv4 only)" },
  {
    name: "PLATFORM_DATA_DIR",
    default: "<checkout>/data",
    meaning: "directory of the SQLite database (platform.db); created if missing (installed package: ./data)",
  },
  { name: "PLATFORM_DATABASE_URL", default: "none", meaning: "postgres://…: store everything in PostgreSQL instead of SQLite" },
  {
    name: "PLATFORM_BASE_URL",
    default: "http://localhost:<PORT>",
    meaning: "the API's own address (audience of issued tokens); https:// with TLS",
  },
  { name: "PLATFORM_AUTH_URL", default: "the base URL", meaning: "issuer of API tokens; serves discovery, JWKS and /sts/exchange" },
  {
    name: "PLATFORM_TLS_CERT_FILE",
    default: "none",
    meaning: "PEM certificate chain: the port serves TLS (h2, http/1.1); SIGHUP re-reads",
  },
  { name: "PLATFORM_TLS_KEY_FILE", default: "none", meaning: "PEM private key of that certificate (set both or neither)" },
  { name: "PLATFORM_USER_ISSUERS", default: "none", meaning: "comma-separated OIDC issuers whose ID tokens sign people in" },
  { name: "PLATFORM_USER_AUDIENCES", default: "the auth URL", meaning: "audiences a sign-in ID token must carry one of" },
  { name: "PLATFORM_CORS_ORIGINS", default: "none", meaning: "comma-separated browser origins allowed to call the API (* for any)" },
  { name: "LOG_LEVEL", default: "info", meaning: "fatal, error, warn, info, debug, trace or silent" },
  { name: "PLATFORM_SHUTDOWN_GRACE_MS", default: "10000", meaning: "how long SIGTERM/SIGINT waits for calls in flight" },
  { name: "PLATFORM_DRAIN_MS", default: "5000", meaning: "after SIGTERM, how long /readyz says 503 while calls are served" },
  { name: "PLATFORM_MAX_MESSAGE_BYTES", default: "4194304", meaning: "largest request message on every protocol, after decompression" },
  { name: "PLATFORM_MAX_ANONYMOUS_MESSAGE_BYTES", default: "65536", meaning: "largest request message of a method that needs no token" },
  { name: "PLATFORM_REQUEST_BODY_TIMEOUT_MS", default: "30000", meaning: "a unary Connect/gRPC-Web body must have arrived within this" },
  { name: "PLATFORM_ALLOW_LOOPBACK_ISSUERS", default: "false", meaning: "development and tests: allow issuers on loopback" },
  { name: "PLATFORM_ISSUER_FETCHES", default: "16", meaning: "upstream issuer fetches (discovery, JWKS) in flight at most" },
  {
    name: "PLATFORM_ISSUER_FETCHES_RESERVED",
    default: "8",
    meaning: "of those, kept for operator issuers and issuers that answered before",
  },
  { name: "PLATFORM_ISSUER_FETCHES_PER_TENANT", default: "2", meaning: "issuer fetches one organization may have in flight" },
  { name: "PLATFORM_ISSUER_NEW_TIMEOUT_MS", default: "2000", meaning: "fetch timeout for an issuer never seen answering (known: 5 s)" },
  {
    name: "PLATFORM_MAX_ORGS_PER_IDENTITY",
    default: "100",
    meaning: "root organizations one identity may create (the administrator: no limit)",
  },
  {
    name: "PLATFORM_CALLS_PER_IDENTITY",
    default: "1000",
    meaning: "calls per second one identity may make to each process, bursts of twice that (0: no limit; the administrator: none)",
  },
  { name: "PLATFORM_EVENT_RETENTION", default: "30d", meaning: "how long the change feed keeps events (d, h, m or s)" },
  {
    name: "PLATFORM_REFRESH_TOKEN_IDLE",
    default: "7d",
    meaning: "a refresh token unused this long stops working (d, h, m or s)",
  },
  {
    name: "PLATFORM_REFRESH_TOKEN_LIFETIME",
    default: "30d",
    meaning: "no refresh token works this long after its sign-in (d, h, m or s)",
  },
  { name: "PLATFORM_EVENT_WATCH_MAX_MS", default: "3600000", meaning: "a WatchEvents stream ends (OK) after this long; clients resume" },
  { name: "PLATFORM_EVENT_WATCH_POLL_MS", default: "1000", meaning: "how often a caught-up watch looks for other processes' events" },
  {
    name: "PLATFORM_EVENT_WATCH_HEARTBEAT_MS",
    default: "15000",
    meaning: "a WatchEvents stream with nothing to send sends a heartbeat this often (below proxies' idle timeouts)",
  },
  { name: "PLATFORM_EVENT_WATCHES_PER_IDENTITY", default: "8", meaning: "WatchEvents streams one identity may hold open per process" },
  {
    name: "PLATFORM_EVENT_WATCHES_PER_ORG",
    default: "100",
    meaning: "WatchEvents streams the identities of one organization may hold open per process, together",
  },
  { name: "PLATFORM_EVENT_WATCHES", default: "1000", meaning: "WatchEvents streams one process serves at once" },
  { name: "PLATFORM_DELIVERIES", default: "on", meaning: "whether this process delivers subscriptions' events (off: other processes do)" },
  { name: "PLATFORM_DELIVERY_CONCURRENCY", default: "16", meaning: "subscriptions one process delivers at once (one slow sink holds one)" },
  { name: "PLATFORM_DELIVERY_LEASE_MS", default: "60000", meaning: "a delivering process's claim outlives its last sign of life by this" },
  { name: "PLATFORM_DELIVERY_POLL_MS", default: "1000", meaning: "how often due subscriptions are looked for between commits" },
  { name: "PLATFORM_MAX_SUBSCRIPTIONS_PER_ORG", default: "25", meaning: "event subscriptions one organization's tree may have" },
  {
    name: "PLATFORM_METRICS_TOKEN",
    default: "none",
    meaning: "GET /metrics (public port and metrics address alike) requires Authorization: Bearer <it>",
  },
  {
    name: "PLATFORM_METRICS_PUBLIC",
    default: "off",
    meaning: "on: /metrics on the public port for anyone, no token; off, without a token or address: refused (403)",
  },
  {
    name: "PLATFORM_METRICS_ADDR",
    default: "none",
    meaning: "host:port serving /metrics instead of the public port (anonymous there unless a token is set)",
  },
  {
    name: "PLATFORM_REGISTRY_SERVICE",
    default: "platform-registry",
    meaning: "the registry's auth.token.service: audience of registry tokens",
  },
  { name: "PLATFORM_REGISTRY_ISSUER", default: "the auth URL", meaning: "the registry's auth.token.issuer: issuer of registry tokens" },
  {
    name: "PLATFORM_REGISTRY_NOTIFY_SECRET",
    default: "none",
    meaning: "bearer secret of the registry's notifications; unset: POST /registry/notifications answers 404",
  },
  { name: "PLATFORM_DATABASE_POOL_SIZE", default: "10", meaning: "PostgreSQL connections each process keeps at most" },
  { name: "PLATFORM_KEEP_ALIVE_TIMEOUT_MS", default: "65000", meaning: "idle HTTP/1.1 keep-alive timeout (above your load balancer's)" },
  { name: "PLATFORM_HTTP2_IDLE_TIMEOUT_MS", default: "300000", meaning: "an HTTP/2 connection with no open stream is closed after this" },
  { name: "PLATFORM_WORKERS", default: "1", meaning: "worker processes serving the one port (auto: one per core)" },
  {
    name: "PLATFORM_MAX_CONNECTIONS",
    default: "auto",
    meaning: "open connections per process (auto: open-file limit - 128, at most 10000)",
  },
  {
    name: "PLATFORM_MAX_CONNECTIONS_PER_ADDRESS",
    default: String(DEFAULT_MAX_CONNECTIONS_PER_ADDRESS),
    meaning: "open connections per process from one client address (IPv6: one /64)",
  },
  {
    name: "PLATFORM_TRUSTED_PROXIES",
    default: "none",
    meaning: "comma-separated CIDRs of proxies whose forwarding and PROXY headers are believed",
  },
  { name: "PLATFORM_PROXY_PROTOCOL", default: "off", meaning: "on: every connection must start with a PROXY v1/v2 header" },
  { name: "PLATFORM_CACHE_BYTES", default: "16777216", meaning: "read-cache budget for answers (records, list pages), per process" },
  {
    name: "PLATFORM_FORWARDED_HEADER",
    default: "x-forwarded-for",
    meaning: "the header trusted proxies write the client into: x-forwarded-for or forwarded",
  },
  {
    name: "PLATFORM_MAX_PENDING_REQUEST_BYTES",
    default: "auto",
    meaning: "gRPC request bytes still arriving held at most per process (auto: max(64 MiB, 16 × message limit))",
  },
  {
    name: "PLATFORM_MAX_PENDING_REQUEST_BYTES_PER_ADDRESS",
    default: "auto",
    meaning: "of those, held at most for one client address (auto: a quarter of the total)",
  },
  { name: "PLATFORM_HTTP2_MAX_CONNECTION_AGE_MS", default: "3600000", meaning: "an HTTP/2 connection this old gets GOAWAY (calls finish)" },
  { name: "PLATFORM_HEALTH_WATCH_MAX_MS", default: "1800000", meaning: "a grpc.health.v1 Health/Watch stream ends (OK) after this" },
  {
    name: "PLATFORM_SIGN_IN_PROVIDERS_FILE",
    default: "none",
    meaning: "JSON list of upstream OpenID providers people sign in at (docs/sign-in.md)",
  },
  {
    name: "PLATFORM_SIGN_IN_PENDING_PER_ADDRESS",
    default: "20",
    meaning: "sign-ins one client address may have pending at once (each lives 10 minutes)",
  },
  { name: "PLATFORM_SKIP_PERMISSION_CHECK", default: "false", meaning: "start even when the data directory is group- or world-accessible" },
];

/** A registry token setting: printable, no spaces, at most 256 characters (it is compared with the registry's). */
function registryText(env: NodeJS.ProcessEnv, name: string, fallback: string, problems: string[]): string {
  const value = env[name] ?? fallback;
  if (!/^[\x21-\x7e]{1,256}$/.test(value)) problems.push(`${name}: must be 1 to 256 printable characters without spaces`);
  return value;
}

/** PLATFORM_REGISTRY_NOTIFY_SECRET: unset, or 16 to 256 printable characters (a header value the registry sends). */
function notifySecret(env: NodeJS.ProcessEnv, problems: string[]): string {
  const value = env.PLATFORM_REGISTRY_NOTIFY_SECRET ?? "";
  if (value !== "" && !/^[\x21-\x7e]{16,256}$/.test(value))
    problems.push("PLATFORM_REGISTRY_NOTIFY_SECRET: must be 16 to 256 printable characters without spaces");
  return value;
}

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

const DURATION_UNITS: Record<string, number> = { d: 86_400_000, h: 3_600_000, m: 60_000, s: 1000 };

/** A duration written as a whole number and a unit (30d, 12h, 90m, 3600s), in milliseconds. */
function duration(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number, problems: string[]): number {
  const raw = env[name];
  if (raw === undefined || raw === "") return fallback;
  const match = /^(\d{1,9})([dhms])$/.exec(raw);
  const ms = match ? Number(match[1]) * DURATION_UNITS[match[2]!]! : NaN;
  if (!(ms >= min && ms <= max)) {
    problems.push(`${name}=${raw}: must be a whole number of d, h, m or s (e.g. 30d), from 1m to 3650d`);
    return fallback;
  }
  return ms;
}

/** integer(), with "auto" (or unset) meaning the default. */
function autoInteger(env: NodeJS.ProcessEnv, name: string, fallback: number, min: number, max: number, problems: string[]): number {
  return (env[name] ?? "auto") === "auto" ? fallback : integer(env, name, fallback, min, max, problems);
}

/** The spellings every on/off setting accepts, whichever its documented default is written as (any case). */
const FLAG_VALUES: Readonly<Record<string, boolean>> = {
  on: true,
  off: false,
  true: true,
  false: false,
  yes: true,
  no: false,
  "1": true,
  "0": false,
};

/**
 * One parser for every on/off setting: on/off, true/false, yes/no or 1/0, in
 * any case; unset or empty is the fallback. Anything else is a start-up
 * problem naming the setting (not a silent default).
 */
function flag(env: NodeJS.ProcessEnv, name: string, fallback: boolean, problems: string[]): boolean {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return fallback;
  const value = FLAG_VALUES[raw.trim().toLowerCase()];
  if (value !== undefined) return value;
  problems.push(`${name}=${raw}: must be on or off (true/false, yes/no and 1/0 are read alike)`);
  return fallback;
}

/** PLATFORM_FORWARDED_HEADER: which forwarding header is read. */
function forwardingHeader(env: NodeJS.ProcessEnv, problems: string[]): Config["forwardedHeader"] {
  const raw = (env.PLATFORM_FORWARDED_HEADER ?? "").trim().toLowerCase();
  if (raw === "" || raw === "x-forwarded-for") return "x-forwarded-for";
  if (raw === "forwarded") return "forwarded";
  problems.push(`PLATFORM_FORWARDED_HEADER=${env.PLATFORM_FORWARDED_HEADER}: must be x-forwarded-for or forwarded`);
  return "x-forwarded-for";
}

/** The TLS certificate and key files, absolute; both or neither may be set. */
function tlsFiles(env: NodeJS.ProcessEnv, problems: string[]): Config["tls"] {
  const certFile = env.PLATFORM_TLS_CERT_FILE ?? "";
  const keyFile = env.PLATFORM_TLS_KEY_FILE ?? "";
  if (certFile === "" && keyFile === "") return undefined;
  if (certFile === "" || keyFile === "") {
    const [set, unset] =
      certFile === "" ? ["PLATFORM_TLS_KEY_FILE", "PLATFORM_TLS_CERT_FILE"] : ["PLATFORM_TLS_CERT_FILE", "PLATFORM_TLS_KEY_FILE"];
    problems.push(`${set} is set but ${unset} is not: set both or neither`);
    return undefined;
  }
  return { certFile: resolve(certFile), keyFile: resolve(keyFile) };
}

/** PLATFORM_METRICS_ADDR: host:port ([v6]:port), port 0 picking a free one. */
function metricsAddress(env: NodeJS.ProcessEnv, problems: string[]): Config["metricsAddr"] {
  const raw = env.PLATFORM_METRICS_ADDR ?? "";
  if (raw === "") return undefined;
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/.exec(raw);
  const port = Number(m?.[3]);
  if (!m || port > 65535) {
    problems.push(`PLATFORM_METRICS_ADDR=${raw}: must be host:port, e.g. 127.0.0.1:9464 or [::1]:9464`);
    return undefined;
  }
  return { host: m[1] ?? m[2]!, port };
}

/**
 * PLATFORM_METRICS_PUBLIC: on serves /metrics to anyone on the public port,
 * which contradicts a token (wanted from every scraper) and a metrics address
 * (the public port then has no /metrics): either pair is a start-up problem,
 * not a silent choice of one.
 */
function metricsPublic(env: NodeJS.ProcessEnv, problems: string[]): boolean {
  const on = flag(env, "PLATFORM_METRICS_PUBLIC", false, problems);
  if (on && (env.PLATFORM_METRICS_TOKEN ?? "") !== "")
    problems.push("PLATFORM_METRICS_PUBLIC=on serves /metrics without a token, but PLATFORM_METRICS_TOKEN is set: set one of them");
  if (on && (env.PLATFORM_METRICS_ADDR ?? "") !== "")
    problems.push(
      "PLATFORM_METRICS_PUBLIC=on serves /metrics on the public port, but PLATFORM_METRICS_ADDR moves it to its own address: set one of them",
    );
  return on;
}

/** A comma-separated list, blanks dropped. */
function list(raw: string | undefined): string[] {
  return (raw ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
}

/**
 * PLATFORM_DATA_DIR's default: data/ in the checkout the command runs from, whatever the working directory
 * (`npm start`, `npm exec platform-api` in a subdirectory and a linked `platform-api` share one database);
 * for a package installed under node_modules, whose directory an upgrade replaces, ./data of the working directory.
 */
export function defaultDataDir(packageRoot = PACKAGE_ROOT): string {
  return packageRoot.split(sep).includes("node_modules") ? resolve("data") : join(packageRoot, "data");
}

/** Reads and validates the configuration; throws ConfigError naming every bad variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const problems: string[] = [];
  const port = integer(env, "PORT", 8080, 0, 65535, problems);
  const tls = tlsFiles(env, problems);
  const baseUrl = url(env, "PLATFORM_BASE_URL", `${tls ? "https" : "http"}://localhost:${port}`, problems);
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
  const issuerFetchMax = integer(env, "PLATFORM_ISSUER_FETCHES", 16, 1, 10_000, problems);
  const issuerFetches = {
    max: issuerFetchMax,
    reserved: integer(env, "PLATFORM_ISSUER_FETCHES_RESERVED", Math.min(8, issuerFetchMax - 1), 0, issuerFetchMax - 1, problems),
    perTenant: integer(env, "PLATFORM_ISSUER_FETCHES_PER_TENANT", Math.min(2, issuerFetchMax), 1, issuerFetchMax, problems),
    newIssuerTimeoutMs: integer(env, "PLATFORM_ISSUER_NEW_TIMEOUT_MS", 2_000, 100, 600_000, problems),
  };
  const maxMessageBytes = integer(env, "PLATFORM_MAX_MESSAGE_BYTES", 4 * 1024 * 1024, 1024, 64 * 1024 * 1024, problems);
  // One largest message and its 5-byte prefix must fit, or no such message could ever arrive.
  const pendingRequestBytes = autoInteger(
    env,
    "PLATFORM_MAX_PENDING_REQUEST_BYTES",
    defaultPendingRequestBytes(maxMessageBytes),
    maxMessageBytes + 5,
    2 ** 40,
    problems,
  );
  const pendingRequestBytesPerAddress = autoInteger(
    env,
    "PLATFORM_MAX_PENDING_REQUEST_BYTES_PER_ADDRESS",
    Math.max(maxMessageBytes + 5, defaultPendingRequestBytesPerAddress(pendingRequestBytes)),
    maxMessageBytes + 5,
    pendingRequestBytes,
    problems,
  );
  const trustedProxies = list(env.PLATFORM_TRUSTED_PROXIES);
  for (const problem of trustedProxyProblems(trustedProxies)) problems.push(`PLATFORM_TRUSTED_PROXIES: ${problem}`);
  const config: Config = {
    port,
    host: env.HOST ?? "::",
    dataDir: resolve(env.PLATFORM_DATA_DIR ?? defaultDataDir()),
    databaseUrl,
    baseUrl,
    tls,
    authUrl,
    logLevel,
    shutdownGraceMs: integer(env, "PLATFORM_SHUTDOWN_GRACE_MS", 10_000, 0, 600_000, problems),
    drainMs: integer(env, "PLATFORM_DRAIN_MS", 5_000, 0, 600_000, problems),
    userIssuers,
    userAudiences: userAudiences.length > 0 ? userAudiences : [authUrl],
    corsOrigins,
    maxMessageBytes,
    // Never more than any other message.
    anonymousMessageBytes: Math.min(
      maxMessageBytes,
      integer(env, "PLATFORM_MAX_ANONYMOUS_MESSAGE_BYTES", 64 * 1024, 1024, 64 * 1024 * 1024, problems),
    ),
    requestBodyTimeoutMs: integer(env, "PLATFORM_REQUEST_BODY_TIMEOUT_MS", 30_000, 100, 3_600_000, problems),
    allowLoopbackIssuers: flag(env, "PLATFORM_ALLOW_LOOPBACK_ISSUERS", false, problems),
    issuerFetches,
    maxOrgsPerIdentity: integer(env, "PLATFORM_MAX_ORGS_PER_IDENTITY", 100, 1, 1_000_000, problems),
    callsPerIdentity: integer(env, "PLATFORM_CALLS_PER_IDENTITY", 1000, 0, 1_000_000, problems),
    eventWatch: {
      maxStreamMs: integer(env, "PLATFORM_EVENT_WATCH_MAX_MS", 3_600_000, 100, 86_400_000, problems),
      pollMs: integer(env, "PLATFORM_EVENT_WATCH_POLL_MS", 1000, 10, 60_000, problems),
      heartbeatMs: integer(env, "PLATFORM_EVENT_WATCH_HEARTBEAT_MS", 15_000, 100, 3_600_000, problems),
      perIdentity: integer(env, "PLATFORM_EVENT_WATCHES_PER_IDENTITY", 8, 1, 10_000, problems),
      perOrganization: integer(env, "PLATFORM_EVENT_WATCHES_PER_ORG", 100, 1, 100_000, problems),
      total: integer(env, "PLATFORM_EVENT_WATCHES", 1000, 1, 100_000, problems),
    },
    deliveries: {
      enabled: flag(env, "PLATFORM_DELIVERIES", true, problems),
      concurrency: integer(env, "PLATFORM_DELIVERY_CONCURRENCY", 16, 1, 1000, problems),
      // Above the 10 s a sink may take (src/delivery/sink.ts), or a slow post would lose its lease.
      leaseMs: integer(env, "PLATFORM_DELIVERY_LEASE_MS", 60_000, 30_000, 3_600_000, problems),
      pollMs: integer(env, "PLATFORM_DELIVERY_POLL_MS", 1000, 10, 60_000, problems),
    },
    maxSubscriptionsPerOrg: integer(env, "PLATFORM_MAX_SUBSCRIPTIONS_PER_ORG", 25, 1, 100_000, problems),
    eventRetentionMs: duration(env, "PLATFORM_EVENT_RETENTION", 30 * 86_400_000, 60_000, 3650 * 86_400_000, problems),
    refresh: {
      idleMs: duration(env, "PLATFORM_REFRESH_TOKEN_IDLE", 7 * 86_400_000, 60_000, 3650 * 86_400_000, problems),
      maxAgeMs: duration(env, "PLATFORM_REFRESH_TOKEN_LIFETIME", 30 * 86_400_000, 60_000, 3650 * 86_400_000, problems),
    },
    metricsToken: env.PLATFORM_METRICS_TOKEN ?? "",
    metricsPublic: metricsPublic(env, problems),
    registry: {
      service: registryText(env, "PLATFORM_REGISTRY_SERVICE", "platform-registry", problems),
      issuer: registryText(env, "PLATFORM_REGISTRY_ISSUER", authUrl, problems),
    },
    registryNotifySecret: notifySecret(env, problems),
    metricsAddr: metricsAddress(env, problems),
    databasePoolSize: integer(env, "PLATFORM_DATABASE_POOL_SIZE", 10, 1, 1000, problems),
    skipPermissionCheck: flag(env, "PLATFORM_SKIP_PERMISSION_CHECK", false, problems),
    keepAliveTimeoutMs: integer(env, "PLATFORM_KEEP_ALIVE_TIMEOUT_MS", 65_000, 1_000, 3_600_000, problems),
    http2IdleTimeoutMs: integer(env, "PLATFORM_HTTP2_IDLE_TIMEOUT_MS", 300_000, 1_000, 86_400_000, problems),
    workers: env.PLATFORM_WORKERS === "auto" ? availableParallelism() : integer(env, "PLATFORM_WORKERS", 1, 1, 256, problems),
    maxConnections:
      (env.PLATFORM_MAX_CONNECTIONS ?? "auto") === "auto"
        ? defaultMaxConnections()
        : integer(env, "PLATFORM_MAX_CONNECTIONS", defaultMaxConnections(), 1, 1_000_000, problems),
    maxConnectionsPerAddress: integer(
      env,
      "PLATFORM_MAX_CONNECTIONS_PER_ADDRESS",
      DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
      1,
      1_000_000,
      problems,
    ),
    trustedProxies,
    proxyProtocol: flag(env, "PLATFORM_PROXY_PROTOCOL", false, problems),
    forwardedHeader: forwardingHeader(env, problems),
    cacheBytes: integer(env, "PLATFORM_CACHE_BYTES", 16 * 1024 * 1024, 0, 4 * 1024 * 1024 * 1024, problems),
    healthWatchMaxMs: integer(env, "PLATFORM_HEALTH_WATCH_MAX_MS", 1_800_000, 100, 86_400_000, problems),
    http2MaxConnectionAgeMs: integer(env, "PLATFORM_HTTP2_MAX_CONNECTION_AGE_MS", 3_600_000, 100, 604_800_000, problems),
    pendingRequestBytes,
    pendingRequestBytesPerAddress,
    signInProviders: readSignInProviders(env.PLATFORM_SIGN_IN_PROVIDERS_FILE ?? "", problems),
    signInPendingPerAddress: integer(env, "PLATFORM_SIGN_IN_PENDING_PER_ADDRESS", 20, 1, 10_000, problems),
  };
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/** The setting that names the sign-in providers file, as each of its problems begins. */
const PROVIDERS_SETTING = "PLATFORM_SIGN_IN_PROVIDERS_FILE";
/** Providers one file may list: a sign-in page is a short list of buttons. */
const MAX_SIGN_IN_PROVIDERS = 20;
const PROVIDER_ID = /^[a-z0-9][a-z0-9-]{0,31}$/;
const PROVIDER_NAME = /^[\x20-\x7e]{1,64}$/;
const CLIENT_TEXT = /^[\x21-\x7e]{1,256}$/;
/** RFC 6749 §3.3 scope-token characters. */
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]{1,64}$/;
const PROVIDER_KEYS = new Set(["id", "name", "issuer", "clientId", "clientSecret", "clientSecretFile", "scopes"]);
const LOOPBACK_HOSTS = new Set(["127.0.0.1", "[::1]", "localhost"]);

/**
 * Reads the providers file: a JSON list of `{id, name, issuer, clientId,
 * clientSecret | clientSecretFile, scopes?}`. Every mistake is one line in
 * problems naming the file, the entry and the field, so the operator fixes
 * them all in one go; the providers are returned only when there is none.
 * Issuers must be canonical https URLs (http only on a loopback host, for a
 * provider on the same machine): the client secret travels to them.
 */
function readSignInProviders(path: string, problems: string[]): SignInProvider[] {
  if (path === "") return [];
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    problems.push(`${PROVIDERS_SETTING}=${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
    return [];
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    problems.push(`${PROVIDERS_SETTING}=${path}: is not JSON (${(err as Error).message})`);
    return [];
  }
  if (!Array.isArray(doc)) {
    problems.push(`${PROVIDERS_SETTING}=${path}: must be a JSON list of providers, [{"id": …, "issuer": …, "clientId": …}, …]`);
    return [];
  }
  if (doc.length > MAX_SIGN_IN_PROVIDERS)
    problems.push(`${PROVIDERS_SETTING}=${path}: lists ${doc.length} providers; at most ${MAX_SIGN_IN_PROVIDERS}`);
  const before = problems.length;
  const providers: SignInProvider[] = [];
  const seen = new Set<string>();
  doc.forEach((entry: unknown, i) => {
    const where = `${PROVIDERS_SETTING}=${path}: provider ${i + 1}`;
    const provider = readProvider(entry, where, problems);
    if (!provider) return;
    if (seen.has(provider.id)) problems.push(`${where}: id ${provider.id} is used by an earlier provider`);
    seen.add(provider.id);
    providers.push(provider);
  });
  return problems.length === before ? providers : [];
}

/** One entry, or null with its problems pushed. */
function readProvider(entry: unknown, where: string, problems: string[]): SignInProvider | null {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
    problems.push(`${where}: must be an object`);
    return null;
  }
  const e = entry as Record<string, unknown>;
  const before = problems.length;
  for (const key of Object.keys(e)) if (!PROVIDER_KEYS.has(key)) problems.push(`${where}: unknown field ${JSON.stringify(key)}`);
  const text = (field: string, rule: RegExp, what: string): string => {
    const value = e[field];
    if (typeof value === "string" && rule.test(value)) return value;
    problems.push(`${where}: ${field} ${value === undefined ? "is required" : `must be ${what}`}`);
    return "";
  };
  const id = text("id", PROVIDER_ID, "1 to 32 lowercase letters, digits and dashes");
  const name = e.name === undefined ? id : text("name", PROVIDER_NAME, "1 to 64 printable characters");
  const issuer = text("issuer", /^\S{1,2048}$/, "a URL");
  if (issuer !== "") {
    const problem = providerIssuerProblem(issuer);
    if (problem) problems.push(`${where}: issuer ${problem}`);
  }
  const clientId = text("clientId", CLIENT_TEXT, "1 to 256 printable characters without spaces");
  const clientSecret = secretOf(e, where, problems);
  const scopes = e.scopes === undefined ? ["email", "profile"] : e.scopes;
  if (!Array.isArray(scopes) || scopes.length > 20 || !scopes.every((s) => typeof s === "string" && SCOPE_TOKEN.test(s))) {
    problems.push(`${where}: scopes must be a list of at most 20 scope names`);
  }
  if (problems.length > before) return null;
  return { id, name, issuer, clientId, clientSecret, scopes: (scopes as string[]).filter((s) => s !== "openid") };
}

/** clientSecret, or the trimmed content of clientSecretFile: exactly one of them. */
function secretOf(e: Record<string, unknown>, where: string, problems: string[]): string {
  const inline = e.clientSecret;
  const file = e.clientSecretFile;
  if ((inline === undefined) === (file === undefined)) {
    problems.push(`${where}: set exactly one of clientSecret and clientSecretFile`);
    return "";
  }
  if (inline !== undefined) {
    if (typeof inline === "string" && CLIENT_TEXT.test(inline)) return inline;
    problems.push(`${where}: clientSecret must be 1 to 256 printable characters without spaces`);
    return "";
  }
  if (typeof file !== "string" || file === "") {
    problems.push(`${where}: clientSecretFile must be a path`);
    return "";
  }
  try {
    const secret = readFileSync(file, "utf8").trim();
    if (CLIENT_TEXT.test(secret)) return secret;
    problems.push(`${where}: clientSecretFile ${file} must hold 1 to 256 printable characters without spaces`);
  } catch (err) {
    problems.push(`${where}: clientSecretFile ${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  return "";
}

/** Why an issuer is unusable, or undefined. */
function providerIssuerProblem(issuer: string): string | undefined {
  if (canonicalIssuer(issuer) === undefined) return "must be a canonical URL: no userinfo, query, fragment, default port or uppercase host";
  const url = new URL(issuer);
  if (url.protocol === "https:") return undefined;
  if (url.protocol === "http:" && LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  return "must use https (http only on 127.0.0.1, [::1] or localhost): the client secret is sent to it";
}
