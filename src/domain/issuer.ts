import { outboundUrlProblem, type OutboundPolicy } from "./outbound-address.js";

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

/** How issuers that users supply (identity claim matches, identity providers) are restricted: see outbound-address.ts. */
export type IssuerPolicy = OutboundPolicy;

/**
 * What is wrong with an issuer a user supplies, or undefined when it is
 * acceptable as written: canonical, https, and not an internal address
 * literal or localhost name (outboundUrlProblem; names are checked again on
 * the address connected to). With allowLoopback, http and https on a
 * loopback host are accepted too.
 */
export function userIssuerProblem(iss: string, policy: IssuerPolicy): string | undefined {
  if (canonicalIssuer(iss) === undefined) {
    return "must be a canonical https URL: no userinfo, query, fragment, backslash, default port or uppercase host";
  }
  return outboundUrlProblem(new URL(iss), policy);
}
