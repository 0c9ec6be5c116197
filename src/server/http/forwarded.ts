import { normalizeAddress, type TrustedProxies } from "../../domain/trusted-proxies.js";

/**
 * A hop a forwarding header names: an IP address, or null for one that
 * cannot be believed as an address (RFC 7239's "unknown" and obfuscated
 * `_names`, a missing for=, anything malformed).
 */
type Hop = string | null;

/** The forwarding header a deployment's proxies write (PLATFORM_FORWARDED_HEADER). */
export type ForwardingHeader = "x-forwarded-for" | "forwarded";

/**
 * The client a request came from, as the forwarding header of a trusted
 * peer says. Only the header the proxies are known to write is read: a proxy
 * that appends to X-Forwarded-For (nginx, Caddy, HAProxy, cloud balancers)
 * passes a client's own Forwarded header through untouched, and the other
 * way round, so believing whichever header is present would let the client
 * choose. Each proxy appends the address it got the request from, so the
 * walk goes from the right: it skips trusted proxies and stops at the first
 * address that is not one. Everything to the left of that was written by the
 * client itself and is never read. A hop that is not an address ends the
 * walk at the last proxy believed (the one that could not say who sent it
 * the request); when every hop is trusted, the leftmost is the client.
 * `peer` is the connection's address, itself trusted (the caller checks).
 */
export function forwardedClient(peer: string, header: ForwardingHeader, value: string | undefined, proxies: TrustedProxies): string {
  if (value === undefined) return peer;
  const hops = header === "forwarded" ? forwardedHops(value) : xForwardedForHops(value);
  let client = peer;
  for (let i = hops.length - 1; i >= 0; i--) {
    const hop = hops[i]!;
    if (hop === null) return client;
    client = hop;
    if (!proxies.has(hop)) return hop;
  }
  return client;
}

/**
 * The for= node of each element of a Forwarded header, left to right.
 * Several header lines arrive joined by commas, which is also how elements
 * are separated. Elements and pairs are split at every comma and semicolon,
 * quoted or not: no proxy writes either inside a for= value, and a client's
 * unbalanced quote then cannot swallow the elements the proxies appended
 * after it (a split quoted value is malformed, which ends the walk).
 */
export function forwardedHops(header: string): Hop[] {
  return header.split(",").map((element) => {
    let node: string | undefined;
    for (const pair of element.split(";")) {
      const eq = pair.indexOf("=");
      if (eq < 0) {
        if (pair.trim() === "") continue;
        return null;
      }
      if (pair.slice(0, eq).trim().toLowerCase() !== "for") continue;
      // Two for= in one element: which one a proxy meant is anyone's guess.
      if (node !== undefined) return null;
      node = pair.slice(eq + 1).trim();
    }
    return node === undefined ? null : forwardedNode(node);
  });
}

/** An RFC 7239 node: "[v6]" or "[v6]:port" (quoted), v4 or v4:port; "unknown", _obfuscated and the rest are null. */
function forwardedNode(value: string): Hop {
  let node = value;
  if (node.startsWith('"')) {
    if (node.length < 2 || !node.endsWith('"')) return null;
    node = node.slice(1, -1).replace(/\\(.)/g, "$1");
  }
  return hopAddress(node);
}

/** The entries of an X-Forwarded-For header (several lines arrive joined by commas), left to right. */
export function xForwardedForHops(header: string): Hop[] {
  return header.split(",").map((entry) => hopAddress(entry.trim()));
}

/**
 * The address of a node written as an address with an optional port (some
 * proxies append one to X-Forwarded-For too): a.b.c.d, a.b.c.d:port, an IPv6
 * address alone, [v6] or [v6]:port. Anything else is null.
 */
function hopAddress(node: string): Hop {
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(node);
  if (bracketed) return normalizeAddress(bracketed[1]!);
  const v4 = /^(\d{1,3}(?:\.\d{1,3}){3})(?::\d{1,5})?$/.exec(node);
  if (v4) return normalizeAddress(v4[1]!);
  return node.includes(":") ? normalizeAddress(node) : null;
}
