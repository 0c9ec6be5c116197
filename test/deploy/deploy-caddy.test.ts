/**
 * docs/deploy/Caddyfile, tested as operators run it: Debian's Caddy 2.6 on
 * loopback with that very file (ports and paths from its environment
 * variables), TLS in front with a test CA, and REST, gRPC, Connect and
 * gRPC-Web called through it over one h2c upstream. Caddy writes
 * X-Forwarded-For itself; the server trusts Caddy (PLATFORM_TRUSTED_PROXIES).
 * Skipped when caddy is not installed, except under CI=true (then it fails).
 */
import { runDeploySuite } from "../support/deploy-suite.js";

runDeploySuite("caddy", { serverEnv: { PLATFORM_TRUSTED_PROXIES: "127.0.0.1/32" }, activeHealthChecks: true });
