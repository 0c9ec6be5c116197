import { StartupError } from "../../startup-error.js";

/** The URL without its password, for messages. */
export function redactedUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== "") u.password = "***";
    return u.toString();
  } catch {
    return "PLATFORM_DATABASE_URL";
  }
}

/** sslmode values node-postgres treats as verify-full, printing a multi-line warning for each when it does. */
const VERIFY_FULL_ALIASES = new Set(["prefer", "require", "verify-ca"]);

/**
 * The URL as the driver is given it. node-postgres (8.x) treats sslmode=prefer, require and verify-ca as
 * verify-full (TLS required, the certificate and host name verified) and says so in a multi-line warning on
 * stderr; naming verify-full keeps that behaviour without the warning, so a start-up failure stays one line.
 * With uselibpqcompat=true the driver gives sslmode libpq's meaning instead, and the URL is left as it is.
 */
export function driverUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  const mode = u.searchParams.get("sslmode");
  if (mode === null || !VERIFY_FULL_ALIASES.has(mode) || u.searchParams.has("uselibpqcompat")) return url;
  u.searchParams.set("sslmode", "verify-full");
  return u.toString();
}

/** Node's codes for a TLS certificate it did not accept. */
const CERTIFICATE_CODES =
  /^(ERR_TLS_CERT_ALTNAME_INVALID|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|CERT_[A-Z_]+)$/;

/**
 * A TLS failure reaching PostgreSQL, as a one-line start-up error naming the fix, or undefined for any other
 * error: a server without TLS while the URL's sslmode requires it, or a certificate the driver did not accept.
 */
export function tlsStartupError(err: unknown, url: string): StartupError | undefined {
  const message = err instanceof Error ? err.message : "";
  const code = (err as { code?: unknown } | null)?.code;
  const where = `cannot use PostgreSQL at ${redactedUrl(url)}`;
  if (/server does not support SSL/i.test(message)) {
    return new StartupError(
      `${where}: the server does not accept TLS connections, and the URL's sslmode requires TLS; turn ssl on in the server, or set sslmode=disable where the network is trusted`,
    );
  }
  if (typeof code === "string" && (CERTIFICATE_CODES.test(code) || code.startsWith("ERR_SSL_"))) {
    return new StartupError(
      `${where}: TLS failed: ${message} (${code}); give the server's CA with sslrootcert=<file> in the URL, or check its host name`,
    );
  }
  return undefined;
}
