import { isIP } from "node:net";

/**
 * Issuer URLs. An issuer is compared as a string (a token's iss against an
 * identity's claim match) but fetched as a parsed URL; the two must agree,
 * or a string a pattern accepts ("http://host\x.trusted.example") is fetched
 * from another host ("http://host/x.trusted.example"). So only canonical
 * issuers are accepted anywhere: strings that new URL() gives back unchanged.
 */

/** Printable ASCII without spaces: anything else never survives URL parsing unchanged. */
const VISIBLE_ASCII = /^[\x21-\x7e]+$/;

/**
 * The issuer if it is canonical, else undefined: an absolute http(s) URL
 * without userinfo, query or fragment whose href round-trips to the same
 * string (so no backslash, no default port spelled out, no uppercase or
 * numeric-shorthand host, no percent-escape that normalizes). An issuer that
 * is only an origin may leave out the trailing slash the href adds
 * ("https://a.example" as well as "https://a.example/").
 */
export function canonicalIssuer(iss: string): string | undefined {
  if (iss.length > 2048 || !VISIBLE_ASCII.test(iss) || iss.includes("\\")) return undefined;
  let url: URL;
  try {
    url = new URL(iss);
  } catch {
    return undefined;
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") return undefined;
  if (url.username !== "" || url.password !== "" || url.search !== "" || url.hash !== "" || iss.endsWith("?") || iss.endsWith("#"))
    return undefined;
  if (url.href === iss || (url.pathname === "/" && url.href === `${iss}/`)) return iss;
  return undefined;
}

/** The host of a URL as an address literal ("::1" without brackets), or undefined for a name. */
export function addressLiteral(url: URL): string | undefined {
  const host = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname;
  return isIP(host) === 0 ? undefined : host;
}

function ipv4Parts(address: string): number[] | undefined {
  const m = /^(?:::ffff:)?(\d+)\.(\d+)\.(\d+)\.(\d+)$/i.exec(address);
  return m ? m.slice(1).map(Number) : undefined;
}

/** True for 127.0.0.0/8 and ::1 (and their IPv4-mapped forms). */
export function isLoopbackAddress(address: string): boolean {
  const v4 = ipv4Parts(address);
  if (v4) return v4[0] === 127;
  return /^(0{0,4}:){7}0{0,3}1$|^::1$/i.test(address);
}

/**
 * True for addresses no user-supplied issuer may resolve to: loopback,
 * private (RFC 1918, fc00::/7), shared (100.64/10), link-local
 * (169.254/16, fe80::/10), unspecified, multicast, reserved and
 * documentation ranges, in IPv4, IPv6 and IPv4-mapped form.
 */
export function isInternalAddress(address: string): boolean {
  const v4 = ipv4Parts(address);
  if (v4) {
    const [a, b] = v4 as [number, number, number, number];
    return (
      a === 0 ||
      a === 10 ||
      a === 127 ||
      a >= 224 ||
      (a === 100 && b >= 64 && b <= 127) ||
      (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168) ||
      (a === 192 && b === 0) ||
      (a === 198 && (b === 18 || b === 19))
    );
  }
  const lower = address.toLowerCase();
  if (lower === "::" || isLoopbackAddress(lower)) return true;
  // Other IPv4-embedding forms (NAT64, 6to4, deprecated compatible) can reach inside too.
  if (/^(::ffff:0:|64:ff9b:|2002:|::[0-9a-f]*\.)/.test(lower)) return true;
  const first = parseInt(lower.split(":")[0] || "0", 16);
  return (first & 0xfe00) === 0xfc00 || (first & 0xffc0) === 0xfe80 || (first & 0xff00) === 0xff00 || lower.startsWith("2001:db8:");
}

/** How issuers that users supply (identity claim matches, identity providers) are restricted. */
export interface IssuerPolicy {
  /** PLATFORM_ALLOW_LOOPBACK_ISSUERS: http and https on loopback addresses are allowed too (development, tests). */
  allowLoopback: boolean;
}

/** True when a connection to address is allowed for a user-supplied issuer. */
export function addressAllowed(address: string, policy: IssuerPolicy): boolean {
  if (policy.allowLoopback && isLoopbackAddress(address)) return true;
  return !isInternalAddress(address);
}

/**
 * What is wrong with an issuer a user supplies, or undefined when it is
 * acceptable as written: canonical, https, and not an internal address
 * literal (names are checked again on the address connected to). With
 * allowLoopback, http and https on a loopback host are accepted too.
 */
export function userIssuerProblem(iss: string, policy: IssuerPolicy): string | undefined {
  if (canonicalIssuer(iss) === undefined) {
    return "must be a canonical https URL: no userinfo, query, fragment, backslash, default port or uppercase host";
  }
  const url = new URL(iss);
  const literal = addressLiteral(url);
  const loopbackHost = literal !== undefined ? isLoopbackAddress(literal) : url.hostname === "localhost";
  if (policy.allowLoopback && loopbackHost) return undefined;
  if (url.protocol !== "https:") return "must use https";
  if (loopbackHost || (literal !== undefined && isInternalAddress(literal))) return "must not be a loopback, private or link-local address";
  return undefined;
}
