/**
 * Where this server may connect for a tenant: the one rule for every URL a
 * tenant makes us fetch (webhook sinks, issuers of identities and identity
 * providers), applied when the URL is accepted and again, by
 * src/auth/guarded-fetch.ts, to every address before a socket connects to it.
 *
 * An address is parsed here, not matched as text: every IPv4 spelling
 * (inet_aton's too: "127.1", "0x7f.1", "2130706433") and every IPv6 one
 * ("::" expanded, a dotted quad at the end, leading zeros, any case, a zone
 * id) comes to the same number. An IPv6 address that stands for an IPv4 one
 * (mapped, compatible, translated, NAT64, 6to4, Teredo) is judged by the
 * IPv4 rules, so "[::ffff:7f00:1]" is loopback like 127.0.0.1. Any IPv6
 * address outside global unicast (2000::/3) is internal. Anything that does
 * not parse is refused.
 */

/** An IP address: IPv4 as one 32-bit number, IPv6 as its eight 16-bit groups. */
export type IpAddress = { family: 4; value: number } | { family: 6; groups: readonly number[] };

/** How tenant-supplied URLs are restricted (PLATFORM_ALLOW_LOOPBACK_ISSUERS sets allowLoopback, for development and tests). */
export interface OutboundPolicy {
  /** http and https on loopback (127/8, ::1, ::ffff:127/8, localhost) are allowed too. */
  allowLoopback: boolean;
}

/** One IPv4 part as inet_aton and WHATWG URL read it: 0x… hex, 0… octal, else decimal. */
function ipv4Number(part: string): number | undefined {
  const [digits, radix, pattern] = /^0x/i.test(part)
    ? [part.slice(2), 16, /^[0-9a-f]*$/i]
    : part.length > 1 && part.startsWith("0")
      ? [part.slice(1), 8, /^[0-7]+$/]
      : [part, 10, /^[0-9]+$/];
  if (!pattern.test(digits)) return undefined;
  return digits === "" ? 0 : parseInt(digits, radix);
}

/** An IPv4 address in any inet_aton spelling (1 to 4 parts, the last filling the rest; one trailing dot), or undefined. */
function parseIpv4(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length > 1 && parts.at(-1) === "") parts.pop();
  if (parts.length > 4 || parts.some((p) => p === "")) return undefined;
  const numbers = parts.map(ipv4Number);
  if (numbers.some((n) => n === undefined)) return undefined;
  const last = numbers.pop()!;
  if (numbers.some((n) => n! > 255) || last >= 2 ** (8 * (4 - numbers.length))) return undefined;
  return numbers.reduce<number>((value, n, i) => value + n! * 2 ** (8 * (3 - i)), last);
}

/** A strict dotted quad (what may end an IPv6 address): four decimal parts of 0–255. */
function dottedQuad(text: string): number | undefined {
  const parts = text.split(".");
  if (parts.length !== 4 || parts.some((p) => !/^\d{1,3}$/.test(p) || Number(p) > 255)) return undefined;
  return parts.reduce((value, p) => value * 256 + Number(p), 0);
}

/** Groups of one side of "::": hex groups of 1–4 digits, the very last may be a dotted quad (two groups). */
function ipv6Groups(side: string, last: boolean): number[] | undefined {
  if (side === "") return [];
  const out: number[] = [];
  const pieces = side.split(":");
  for (const [i, piece] of pieces.entries()) {
    if (/^[0-9a-f]{1,4}$/i.test(piece)) out.push(parseInt(piece, 16));
    else {
      const v4 = last && i === pieces.length - 1 ? dottedQuad(piece) : undefined;
      if (v4 === undefined) return undefined;
      out.push(v4 >>> 16, v4 & 0xffff);
    }
  }
  return out;
}

/** An IPv6 address (brackets, a zone id after "%" and any case allowed), as eight groups, or undefined. */
function parseIpv6(text: string): number[] | undefined {
  let s = text.startsWith("[") && text.endsWith("]") ? text.slice(1, -1) : text;
  const zone = s.indexOf("%");
  if (zone >= 0) s = s.slice(0, zone);
  if (!s.includes(":")) return undefined;
  const halves = s.split("::");
  if (halves.length > 2) return undefined;
  const head = ipv6Groups(halves[0]!, halves.length === 1);
  const tail = halves.length === 2 ? ipv6Groups(halves[1]!, true) : [];
  if (head === undefined || tail === undefined) return undefined;
  const missing = 8 - head.length - tail.length;
  if (halves.length === 1 ? missing !== 0 : missing < 1) return undefined;
  return [...head, ...Array<number>(halves.length === 2 ? missing : 0).fill(0), ...tail];
}

/** text as an IP address (IPv4 in any spelling, IPv6 with or without brackets and zone), or undefined for anything else. */
export function parseAddress(text: string): IpAddress | undefined {
  const groups = parseIpv6(text);
  if (groups !== undefined) return { family: 6, groups };
  const value = parseIpv4(text);
  return value === undefined ? undefined : { family: 4, value };
}

/** The canonical text of an address: a dotted quad, or RFC 5952 IPv6 (lowercase, longest zero run as "::", no zone), as URL prints it. */
function formatAddress(address: IpAddress): string {
  if (address.family === 4) return [24, 16, 8, 0].map((shift) => (address.value >>> shift) & 0xff).join(".");
  const g = address.groups;
  let [best, bestLength] = [-1, 1];
  for (let i = 0; i < 8; i++) {
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLength) [best, bestLength] = [i, j - i];
    i = j;
  }
  const hex = (from: number, to: number) => g.slice(from, to).map((n) => n.toString(16));
  if (best < 0) return hex(0, 8).join(":");
  return `${hex(0, best).join(":")}::${hex(best + bestLength, 8).join(":")}`;
}

/** The canonical text of an address literal, or undefined when text is not one. */
export function canonicalAddress(text: string): string | undefined {
  const address = parseAddress(text);
  return address === undefined ? undefined : formatAddress(address);
}

/** [first address, prefix length] → a test of membership. */
function ipv4Range(base: string, prefix: number): (value: number) => boolean {
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  const start = parseIpv4(base)!;
  return (value) => (value & mask) >>> 0 === start;
}

function ipv6Range(base: string, prefix: number): (groups: readonly number[]) => boolean {
  const start = parseIpv6(base)!;
  return (groups) =>
    start.every((want, i) => {
      const bits = Math.min(16, Math.max(0, prefix - 16 * i));
      const mask = (0xffff << (16 - bits)) & 0xffff;
      return (groups[i]! & mask) === (want & mask);
    });
}

/** IPv4 ranges never connected to for a tenant (RFC 6890's special-purpose registry, less the globally reachable). */
const IPV4_INTERNAL = [
  ipv4Range("0.0.0.0", 8), // "this network"; 0.0.0.0 itself reaches this host
  ipv4Range("10.0.0.0", 8), // private
  ipv4Range("100.64.0.0", 10), // shared address space (CGNAT)
  ipv4Range("127.0.0.0", 8), // loopback
  ipv4Range("169.254.0.0", 16), // link-local (cloud metadata)
  ipv4Range("172.16.0.0", 12), // private
  ipv4Range("192.0.0.0", 24), // IETF protocol assignments
  ipv4Range("192.0.2.0", 24), // documentation (TEST-NET-1)
  ipv4Range("192.88.99.0", 24), // 6to4 relay anycast (deprecated)
  ipv4Range("192.168.0.0", 16), // private
  ipv4Range("198.18.0.0", 15), // benchmarking
  ipv4Range("198.51.100.0", 24), // documentation (TEST-NET-2)
  ipv4Range("203.0.113.0", 24), // documentation (TEST-NET-3)
  ipv4Range("224.0.0.0", 4), // multicast
  ipv4Range("240.0.0.0", 4), // reserved, and 255.255.255.255 broadcast
];
const IPV4_LOOPBACK = ipv4Range("127.0.0.0", 8);

const IPV6_MAPPED = ipv6Range("::ffff:0:0", 96);
/** IPv6 ranges whose last 32 bits are an IPv4 address the packet goes to. */
const IPV6_EMBEDDING_LAST_32 = [
  IPV6_MAPPED, // IPv4-mapped
  ipv6Range("::", 96), // IPv4-compatible (deprecated), :: and ::1 included (0.0.0.0/8)
  ipv6Range("::ffff:0:0:0", 96), // IPv4-translated (SIIT)
  ipv6Range("64:ff9b::", 96), // NAT64 well-known prefix
];
const IPV6_6TO4 = ipv6Range("2002::", 16);
const IPV6_TEREDO = ipv6Range("2001::", 32);
const IPV6_GLOBAL_UNICAST = ipv6Range("2000::", 3);
/** Inside global unicast, yet never a tenant's: documentation, benchmarking, ORCHID. */
const IPV6_INTERNAL_GLOBAL = [
  ipv6Range("2001:db8::", 32),
  ipv6Range("3fff::", 20),
  ipv6Range("2001:2::", 48),
  ipv6Range("2001:10::", 28),
  ipv6Range("2001:20::", 28),
];

const ipv4Of = (high: number, low: number) => ((high << 16) >>> 0) + low;

/**
 * The IPv4 addresses an IPv6 address stands for, or undefined when it
 * embeds none: the last 32 bits of a mapped, compatible, translated or NAT64
 * address; bits 16–47 of 6to4; a Teredo address's server (bits 32–63) and
 * client (the last 32 bits, inverted).
 */
function embeddedIpv4(groups: readonly number[]): number[] | undefined {
  const g = groups;
  if (IPV6_EMBEDDING_LAST_32.some((inRange) => inRange(g))) return [ipv4Of(g[6]!, g[7]!)];
  if (IPV6_6TO4(g)) return [ipv4Of(g[1]!, g[2]!)];
  if (IPV6_TEREDO(g)) return [ipv4Of(g[2]!, g[3]!), (ipv4Of(g[6]!, g[7]!) ^ 0xffffffff) >>> 0];
  return undefined;
}

function ipInternal(address: IpAddress): boolean {
  if (address.family === 4) return IPV4_INTERNAL.some((inRange) => inRange(address.value));
  const embedded = embeddedIpv4(address.groups);
  if (embedded !== undefined) return embedded.some((value) => ipInternal({ family: 4, value }));
  return !IPV6_GLOBAL_UNICAST(address.groups) || IPV6_INTERNAL_GLOBAL.some((inRange) => inRange(address.groups));
}

function ipLoopback(address: IpAddress): boolean {
  if (address.family === 4) return IPV4_LOOPBACK(address.value);
  const g = address.groups;
  if (IPV6_MAPPED(g)) return IPV4_LOOPBACK(ipv4Of(g[6]!, g[7]!));
  return g.every((n, i) => n === (i === 7 ? 1 : 0));
}

/**
 * True for an address a tenant's URL may never reach: loopback, private,
 * shared (CGNAT), link-local, unspecified, multicast, broadcast, reserved,
 * documentation and benchmarking ranges, IPv6 outside global unicast
 * (unique-local, site-local, link-local, multicast, local-use NAT64…), and
 * any IPv6 address embedding such an IPv4 one. True as well for text that
 * is not an address at all: what cannot be read is refused.
 */
export function isInternalAddress(text: string): boolean {
  const address = parseAddress(text);
  return address === undefined || ipInternal(address);
}

/** True for 127.0.0.0/8, ::1 and ::ffff:127.0.0.0/104 (a dual-stack socket's view of 127/8), in any spelling. */
export function isLoopbackAddress(text: string): boolean {
  const address = parseAddress(text);
  return address !== undefined && ipLoopback(address);
}

/** True for localhost and names under it (RFC 6761), in any case, with or without the root's trailing dot. */
function isLoopbackName(hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, "");
  return name === "localhost" || name.endsWith(".localhost");
}

/** True when this server may connect to address for a tenant under policy. */
export function outboundAddressAllowed(address: string, policy: OutboundPolicy): boolean {
  const parsed = parseAddress(address);
  if (parsed === undefined) return false;
  if (policy.allowLoopback && ipLoopback(parsed)) return true;
  return !ipInternal(parsed);
}

/** Where a URL's host points as far as can be told without resolving it ("external" for a name: its addresses are checked when resolved). */
export type HostScope = "loopback" | "internal" | "external";

/** The scope of url's host: an address literal by the rules above, localhost names as loopback. */
export function urlHostScope(url: URL): HostScope {
  // URL has already turned every numeric host into a dotted quad: a hostname that parses as an address is one.
  const address = parseAddress(url.hostname);
  if (address !== undefined) return ipLoopback(address) ? "loopback" : ipInternal(address) ? "internal" : "external";
  return isLoopbackName(url.hostname) ? "loopback" : "external";
}

/**
 * What is wrong with where url points for a tenant, or undefined when it may
 * be fetched: https to a host that is not an internal address or a localhost
 * name; with allowLoopback, http or https to a loopback host too.
 */
export function outboundUrlProblem(url: URL, policy: OutboundPolicy): string | undefined {
  const scope = urlHostScope(url);
  if (policy.allowLoopback && scope === "loopback") return undefined;
  if (url.protocol !== "https:") return "must use https";
  if (scope !== "external") return "must not be a loopback, private or link-local address";
  return undefined;
}
