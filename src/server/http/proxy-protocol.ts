import net from "node:net";
import { normalizeAddress } from "../../domain/trusted-proxies.js";
import type { ClientAddresses } from "./client-address.js";

/**
 * The PROXY protocol (HAProxy's proxy-protocol.txt), versions 1 and 2: a
 * proxy that passes TCP through (HAProxy `send-proxy`, nginx stream
 * `proxy_protocol on`, AWS NLB, Caddy's proxy_protocol) starts the
 * connection with a header naming the client it accepted, then relays the
 * client's bytes unchanged.
 */

/** The longest version 1 header, CRLF included, as the spec bounds it. */
export const MAX_V1_BYTES = 107;
/**
 * The longest version 2 header accepted: 16 bytes, then addresses and TLVs
 * of at most 2,048 bytes. The spec allows 64 KiB, but what proxies send is
 * far smaller (addresses 12 or 36 bytes, UNIX 216; HAProxy's ALPN, authority,
 * unique id ≤ 128 and SSL TLVs, AWS's VPC endpoint id: a few hundred bytes),
 * and this is read before anything is known about the peer.
 */
export const MAX_V2_BYTES = 16 + 2048;

const V1_PREFIX = Buffer.from("PROXY ");
const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);

/** The client a header names (null: LOCAL, UNKNOWN or an unsupported family; the TCP peer is the client). */
export type ProxySource = { address: string; port: number } | null;

/** What the bytes read so far hold. */
export type ProxyHeaderParse =
  | { state: "incomplete" }
  | { state: "invalid"; reason: string }
  | { state: "complete"; length: number; source: ProxySource };

/** Parses a PROXY header at the start of buf, which holds the connection's first bytes; never throws. */
export function parseProxyHeader(buf: Buffer): ProxyHeaderParse {
  if (buf.length === 0) return { state: "incomplete" };
  if (buf[0] === V2_SIGNATURE[0]) return startsWith(buf, V2_SIGNATURE) ? parseV2(buf) : invalid("no PROXY protocol header");
  return startsWith(buf, V1_PREFIX) ? parseV1(buf) : invalid("no PROXY protocol header");
}

const invalid = (reason: string): ProxyHeaderParse => ({ state: "invalid", reason });
const INCOMPLETE: ProxyHeaderParse = { state: "incomplete" };

/** Whether buf and prefix agree on their common length (buf may be shorter: more bytes are to come). */
function startsWith(buf: Buffer, prefix: Buffer): boolean {
  const n = Math.min(buf.length, prefix.length);
  return buf.subarray(0, n).equals(prefix.subarray(0, n));
}

/** "PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\r\n", or "PROXY UNKNOWN …\r\n". */
function parseV1(buf: Buffer): ProxyHeaderParse {
  const end = buf.subarray(0, MAX_V1_BYTES).indexOf("\r\n");
  if (end < 0) return buf.length >= MAX_V1_BYTES ? invalid("PROXY v1 header longer than 107 bytes") : INCOMPLETE;
  const fields = buf.subarray(0, end).toString("latin1").split(" ");
  if (fields[1] === "UNKNOWN") return { state: "complete", length: end + 2, source: null };
  const family = fields[1] === "TCP4" ? 4 : fields[1] === "TCP6" ? 6 : 0;
  const [, , source = "", destination = "", sourcePort = "", destinationPort = ""] = fields;
  if (family === 0 || fields.length !== 6) return invalid("PROXY v1 header is not TCP4, TCP6 or UNKNOWN with four fields");
  if (net.isIP(source) !== family || net.isIP(destination) !== family) return invalid("PROXY v1 address of the wrong family");
  if (!isPort(sourcePort) || !isPort(destinationPort)) return invalid("PROXY v1 port is not 0 to 65535");
  return { state: "complete", length: end + 2, source: { address: normalizeAddress(source)!, port: Number(sourcePort) } };
}

function isPort(text: string): boolean {
  return /^\d{1,5}$/.test(text) && Number(text) <= 65535;
}

/** Version 2: signature, version and command, family and protocol, a length, addresses, TLVs (skipped). */
function parseV2(buf: Buffer): ProxyHeaderParse {
  if (buf.length < 16) return INCOMPLETE;
  const version = buf[12]! >> 4;
  const command = buf[12]! & 0x0f;
  if (version !== 2 || command > 1) return invalid("PROXY v2 header of an unknown version or command");
  const family = buf[13]!;
  const length = 16 + buf.readUInt16BE(14);
  if (length > MAX_V2_BYTES) return invalid(`PROXY v2 header longer than ${MAX_V2_BYTES} bytes`);
  if (buf.length < length) return INCOMPLETE;
  // LOCAL: the proxy's own connection (a health check); the TCP peer is the client.
  if (command === 0) return { state: "complete", length, source: null };
  if (family === 0x11) {
    if (length < 16 + 12) return invalid("PROXY v2 TCP4 header too short for its addresses");
    return { state: "complete", length, source: { address: [...buf.subarray(16, 20)].join("."), port: buf.readUInt16BE(24) } };
  }
  if (family === 0x21) {
    if (length < 16 + 36) return invalid("PROXY v2 TCP6 header too short for its addresses");
    const groups = Array.from({ length: 8 }, (_, i) => buf.readUInt16BE(16 + 2 * i).toString(16));
    return { state: "complete", length, source: { address: normalizeAddress(groups.join(":"))!, port: buf.readUInt16BE(48) } };
  }
  // UNSPEC, UDP and UNIX sockets: the spec has the receiver use the real connection's addresses.
  if ([0x00, 0x12, 0x22, 0x31, 0x32].includes(family)) return { state: "complete", length, source: null };
  return invalid("PROXY v2 header of an unknown address family");
}

/**
 * Reads the PROXY header every connection must start with, before anything
 * else reads the socket; then makes the client it names the connection's
 * client address, puts back the bytes read past the header and calls next.
 * A peer that may not send one (not a trusted proxy, when some are listed)
 * is closed before anything is read; so is a connection whose header is
 * missing, malformed, over the size bounds or not complete within timeoutMs.
 */
export function readProxyHeader(socket: net.Socket, clients: ClientAddresses, timeoutMs: number, next: () => void): void {
  if (!clients.mayProxy(socket)) return void socket.destroy();
  const onError = () => socket.destroy();
  socket.on("error", onError);
  let buf: Buffer = Buffer.alloc(0);
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  socket.once("close", () => clearTimeout(timer));
  const onReadable = () => {
    let chunk: Buffer | null;
    while ((chunk = socket.read() as Buffer | null) !== null) buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
    const header = parseProxyHeader(buf);
    if (header.state === "incomplete") return;
    clearTimeout(timer);
    socket.off("readable", onReadable);
    if (header.state === "invalid") return void socket.destroy();
    socket.off("error", onError);
    if (header.source !== null) clients.carry(socket, header.source.address);
    if (buf.length > header.length) socket.unshift(buf.subarray(header.length));
    next();
  };
  socket.on("readable", onReadable);
}
