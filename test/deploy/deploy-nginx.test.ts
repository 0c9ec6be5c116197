/**
 * docs/deploy/nginx.conf, tested as operators run it: Debian's nginx 1.22 on
 * loopback with that very file (only ports and paths filled in), TLS in front
 * with a test CA, and REST, gRPC, Connect and gRPC-Web called through it.
 * nginx cannot proxy_pass over h2c, so the file sends native gRPC to
 * grpc_pass and everything else over kept-alive HTTP/1.1; the server trusts
 * nginx (PLATFORM_TRUSTED_PROXIES) and reads the client from X-Forwarded-For.
 * Skipped when nginx is not installed, except under CI=true (then it fails).
 */
import { runDeploySuite } from "../support/deploy-suite.js";

runDeploySuite("nginx", { serverEnv: { PLATFORM_TRUSTED_PROXIES: "127.0.0.1/32" }, activeHealthChecks: false });
