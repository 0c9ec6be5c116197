/**
 * docs/deploy/haproxy.cfg, tested as operators run it: Debian's HAProxy 2.6 on
 * loopback with that very file (ports and paths from its environment
 * variables), TLS in front with a test CA, and REST, gRPC, Connect and
 * gRPC-Web called through it over one h2c backend (`proto h2`). HAProxy
 * opens every connection, health checks included, with a PROXY v2 header
 * (`send-proxy-v2`), so the server runs with PLATFORM_PROXY_PROTOCOL=on.
 * Skipped when haproxy is not installed, except under CI=true (then it fails).
 */
import { runDeploySuite } from "./support/deploy-suite.js";

runDeploySuite("haproxy", { serverEnv: { PLATFORM_PROXY_PROTOCOL: "on" }, activeHealthChecks: true });
