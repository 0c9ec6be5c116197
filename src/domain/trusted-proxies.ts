import net from "node:net";

/**
 * The peers whose word about a client is believed: their forwarding headers
 * (Forwarded, X-Forwarded-For) and their PROXY protocol headers. Anyone else
 * could write any address there, so from anyone else those are ignored.
 */
export interface TrustedProxies {
  /** True when nobody is trusted (the default): forwarding headers are never read. */
  readonly none: boolean;
  /** Whether an address (as normalizeAddress writes it) is in one of the trusted ranges. */
  has(address: string): boolean;
}

/**
 * An IP address in the one spelling every per-address limit and log line
 * uses: an IPv4-mapped IPv6 address as plain IPv4, IPv6 as RFC 5952 writes it; null
 * when text is not an IP address literal (zone ids such as %eth0 are not:
 * no proxy forwards them and they would give one client many spellings).
 */
export function normalizeAddress(text: string): string | null {
  // The common case on a dual-stack listener, without the IPv6 work below.
  if (text.startsWith("::ffff:") && net.isIPv4(text.slice(7))) return text.slice(7);
  const family = net.isIP(text);
  if (family === 4) return text;
  if (family !== 6 || text.includes("%")) return null;
  let canonical = canonicalIpv6.get(text);
  if (canonical === undefined) {
    // Bounded: addresses from forwarding headers are anyone's choice.
    if (canonicalIpv6.size >= MAX_CACHED_IPV6) canonicalIpv6.clear();
    canonicalIpv6.set(text, (canonical = canonicalize(text)));
  }
  return canonical;
}

/** IPv6 spellings already made canonical (the URL parser costs about a microsecond). */
const canonicalIpv6 = new Map<string, string>();
const MAX_CACHED_IPV6 = 4096;

/** A valid IPv6 address as RFC 5952 writes it (the WHATWG URL parser does); an IPv4-mapped one as IPv4. */
function canonicalize(text: string): string {
  const canonical = new URL(`http://[${text}]/`).hostname.slice(1, -1);
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(canonical);
  if (!mapped) return canonical;
  const [high, low] = [parseInt(mapped[1]!, 16), parseInt(mapped[2]!, 16)];
  return `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
}

/** A normalized address as 16-bit groups: two for IPv4, eight for IPv6. */
function groupsOf(address: string): number[] {
  if (!address.includes(":")) {
    const [a = 0, b = 0, c = 0, d = 0] = address.split(".").map(Number);
    return [(a << 8) | b, (c << 8) | d];
  }
  const [head = "", tail] = address.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === undefined || tail === "" ? [] : tail.split(":");
  const zeros = Array<string>(8 - left.length - right.length).fill("0");
  return [...left, ...(tail === undefined ? [] : zeros), ...right].map((g) => parseInt(g, 16));
}

/** One CIDR range of PLATFORM_TRUSTED_PROXIES: an address with an optional /prefix (none: that address alone). */
interface Range {
  /** The network's 16-bit groups (two: IPv4; eight: IPv6). */
  groups: number[];
  prefix: number;
}

/** Parses one entry; a message saying what is wrong with it instead when it is not a valid range. */
function parseRange(entry: string): Range | string {
  const slash = entry.indexOf("/");
  const network = normalizeAddress(slash < 0 ? entry : entry.slice(0, slash));
  if (network === null) return `${entry} is not an IP address or CIDR range (like 10.0.0.0/8 or fd00::/8)`;
  const family = network.includes(":") ? "ipv6" : "ipv4";
  const max = family === "ipv4" ? 32 : 128;
  const prefixText = slash < 0 ? String(max) : entry.slice(slash + 1);
  const prefix = Number(prefixText);
  if (!/^\d{1,3}$/.test(prefixText) || prefix > max) return `${entry}: the prefix length must be 0 to ${max}`;
  return { groups: groupsOf(network), prefix };
}

/** What is wrong with each invalid entry of a trusted-proxy list (none when all are valid), for the configuration's errors. */
export function trustedProxyProblems(entries: readonly string[]): string[] {
  return entries.map(parseRange).filter((r): r is string => typeof r === "string");
}

/**
 * The trusted proxies of a list of CIDR ranges and single addresses, IPv4
 * and IPv6 alike. Throws on an invalid entry (loadConfig reports those
 * first, with trustedProxyProblems).
 */
export function parseTrustedProxies(entries: readonly string[]): TrustedProxies {
  const ranges = entries.map((entry) => {
    const range = parseRange(entry);
    if (typeof range === "string") throw new Error(`PLATFORM_TRUSTED_PROXIES: ${range}`);
    return range;
  });
  const none = ranges.length === 0;
  return {
    none,
    has(address) {
      if (none || net.isIP(address) === 0) return false;
      const groups = groupsOf(address);
      return ranges.some((range) => range.groups.length === groups.length && inRange(groups, range));
    },
  };
}

/** Whether the groups of an address of the range's family lie in it: its first `prefix` bits are the network's. */
function inRange(groups: number[], range: Range): boolean {
  let bits = range.prefix;
  for (let i = 0; bits > 0; i++, bits -= 16) {
    const mask = bits >= 16 ? 0xffff : (0xffff << (16 - bits)) & 0xffff;
    if ((groups[i]! & mask) !== (range.groups[i]! & mask)) return false;
  }
  return true;
}

/** Nobody trusted: the default. */
export const NO_TRUSTED_PROXIES: TrustedProxies = parseTrustedProxies([]);
