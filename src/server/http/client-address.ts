import type { Socket } from "node:net";
import type * as grpc from "@grpc/grpc-js";
import type { FastifyInstance } from "fastify";
import { NO_TRUSTED_PROXIES, normalizeAddress, parseTrustedProxies, type TrustedProxies } from "../../domain/trusted-proxies.js";
import { forwardedClient, type ForwardingHeader } from "./forwarded.js";

/**
 * What the client address is read from: the TCP peer. An HTTP/2 request's
 * socket (a proxy of its session's) and a TLS socket pass both through.
 */
export type PeerSocket = Pick<Socket, "remoteAddress" | "remotePort">;

/** A request as every HTTP entry point has it (node's IncomingMessage, HTTP/2's compat request, fastify's request). */
export interface PeerRequest {
  socket: PeerSocket;
  headers: Record<string, string | string[] | undefined>;
}

/** Who is believed about clients (PLATFORM_TRUSTED_PROXIES, PLATFORM_PROXY_PROTOCOL). */
export interface ClientAddressOptions {
  /** CIDR ranges and addresses of trusted proxies (default none). */
  trustedProxies?: readonly string[];
  /** Whether every connection starts with a PROXY protocol header (default false). */
  proxyProtocol?: boolean;
  /** The one forwarding header the trusted proxies write (default X-Forwarded-For); the other is never read. */
  forwardedHeader?: ForwardingHeader;
}

/**
 * The one place that decides who a connection's and a request's client is,
 * for every per-address limit (connection caps, the HTTP/2 byte budget, the
 * invite attempt limiter) and the log line. One per listener: the addresses
 * PROXY headers carried are keyed by the TCP peer's address and port, which
 * is what grpc-js's getPeer() gives a call, so native gRPC finds them too.
 */
export interface ClientAddresses {
  readonly proxies: TrustedProxies;
  /** Whether every connection must start with a PROXY protocol header. */
  readonly proxyProtocol: boolean;
  /** Whether socket's TCP peer may send a PROXY header: anyone when no proxies are listed, else only those listed. */
  mayProxy(socket: PeerSocket): boolean;
  /** Makes address (a PROXY header's source) socket's client address until the socket closes. */
  carry(socket: Socket, address: string): void;
  /** The connection's client address: what its PROXY header carried, else its TCP peer; "" when unknown. */
  ofConnection(socket: PeerSocket): string;
  /**
   * The key per-address limits count a connection under (addressLimitKey of
   * its client address). A connection whose client address is a trusted
   * proxy gets a key of its own: the proxy's clients are not one client, so
   * only the limits on totals apply to it.
   */
  limitKeyOf(socket: PeerSocket): string;
  /** The client address of an HTTP request: the connection's, or, when that is a trusted proxy, what its forwarding headers say. */
  ofRequest(req: PeerRequest): string;
  /** The same for a native gRPC call, from grpc-js's peer string ("address:port" or "unknown") and its metadata. */
  ofGrpcCall(peer: string, metadata: grpc.Metadata): string;
}

/** The client addresses of one listener. */
export function createClientAddresses(opts: ClientAddressOptions = {}): ClientAddresses {
  const proxies = opts.trustedProxies ? parseTrustedProxies(opts.trustedProxies) : NO_TRUSTED_PROXIES;
  const proxyProtocol = opts.proxyProtocol ?? false;
  const forwardedHeader = opts.forwardedHeader ?? "x-forwarded-for";
  const carried = new Map<string, string>();
  const carriedFor = (peer: string) => (proxyProtocol ? carried.get(peer) : undefined);
  const ofConnection = (socket: PeerSocket) => carriedFor(peerKey(socket)) ?? tcpPeer(socket);
  /** A trusted peer's forwarding header names the client; anyone else's are ignored. */
  const fromHeaders = (peer: string, header: (name: string) => string | undefined) =>
    proxies.none || !proxies.has(peer) ? peer : forwardedClient(peer, forwardedHeader, header(forwardedHeader), proxies);
  return {
    proxies,
    proxyProtocol,
    mayProxy: (socket) => proxies.none || proxies.has(tcpPeer(socket)),
    carry(socket, address) {
      const key = peerKey(socket);
      carried.set(key, address);
      socket.once("close", () => {
        // A new connection from the same address and port may have been accepted before this one's close ran.
        if (carried.get(key) === address) carried.delete(key);
      });
    },
    ofConnection,
    limitKeyOf(socket) {
      const address = ofConnection(socket);
      return proxies.has(address) ? `proxy connection ${peerKey(socket)}` : addressLimitKey(address);
    },
    ofRequest: (req) => fromHeaders(ofConnection(req.socket), (name) => joined(req.headers[name])),
    ofGrpcCall(peer, metadata) {
      const address = carriedFor(peer) ?? (peer === "unknown" ? "" : (normalizeAddress(peer.replace(/:\d+$/, "")) ?? ""));
      return fromHeaders(address, (name) => joined(metadata.get(name).map(String)));
    },
  };
}

declare module "fastify" {
  interface FastifyRequest {
    /** The request's client address (ClientAddresses.ofRequest): what every entry point puts in clientAddressKey. */
    readonly clientAddress: string;
  }
}

/** Gives every fastify request (HTTP/1.1 and HTTP/2 alike) its clientAddress, decided by clients. */
export function installClientAddresses(app: FastifyInstance, clients: ClientAddresses): void {
  // With proxies to look past, the header walk (about a microsecond) is done once per request, however often it is asked.
  const decided = new WeakMap<PeerRequest, string>();
  app.decorateRequest("clientAddress", {
    getter(this: PeerRequest) {
      if (clients.proxies.none) return clients.ofRequest(this);
      let address = decided.get(this);
      if (address === undefined) decided.set(this, (address = clients.ofRequest(this)));
      return address;
    },
  });
}

/** The TCP peer's address and port, the key of what a PROXY header carried (grpc-js's getPeer() format). */
function peerKey(socket: PeerSocket): string {
  return `${socket.remoteAddress}:${socket.remotePort}`;
}

/** The TCP peer's address, normalized (an IPv4-mapped IPv6 address as IPv4); "" when the socket closed before it was read. */
function tcpPeer(socket: PeerSocket): string {
  return normalizeAddress(socket.remoteAddress ?? "") ?? "";
}

/** Several lines of one header, as one comma-separated list (node joins most repeated headers so already). */
function joined(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? (value.length === 0 ? undefined : value.join(",")) : value;
}

/**
 * The key per-address limits count under: an IPv4 address as it is, an IPv6
 * address by its /64 prefix, because one IPv6 subscriber is routinely given a
 * whole /64 and could otherwise open each connection from a new address.
 */
function addressLimitKey(address: string): string {
  if (!address.includes(":")) return address;
  const [head = "", tail] = address.split("::");
  const groups = head === "" ? [] : head.split(":");
  if (tail !== undefined) {
    const rest = tail === "" ? [] : tail.split(":");
    groups.push(...Array<string>(Math.max(0, 8 - groups.length - rest.length)).fill("0"), ...rest);
  }
  return `${groups
    .slice(0, 4)
    .map((g) => g.toLowerCase().replace(/^0+(?=.)/, ""))
    .join(":")}::/64`;
}
