import type { Socket } from "node:net";
import { createClientAddresses, type ClientAddresses } from "./client-address.js";

/** How many connections the one-port listener keeps open at once. */
export interface ConnectionLimits {
  /** Open connections in total, every protocol alike. */
  total: number;
  /** Open connections from one client address (an IPv6 /64 counts as one; see addressLimitKey); trusted proxies are exempt. */
  perAddress: number;
  /** Told about every connection closed at once for being over a cap (a metric counts them). */
  onRefused?: (cap: RefusedCap) => void;
}

/** Which cap closed a connection: the label of platform_connections_refused_total. */
export type RefusedCap = "total" | "per_address";

/** Counts open connections by client address and turns away those over a cap. */
export interface ConnectionGate {
  /**
   * Counts socket in until it closes, or resets and destroys it at once when
   * a cap is reached: before anything is read, parsed or allocated for it.
   * With PROXY protocol the client is not known yet: only the total is
   * checked here, and admitClient checks the rest once the header is read.
   * Returns whether it was admitted.
   */
  admit(socket: Socket): boolean;
  /** The per-address cap of a socket whose PROXY header was read (it carried the client address); false when refused. */
  admitClient(socket: Socket): boolean;
}

/**
 * A gate over the limits, counting per address under clients.limitKeyOf: a
 * connection from a trusted proxy, which carries many clients, only counts
 * in the total. Per-address counts are dropped when they reach zero, so the
 * map holds only open clients.
 */
export function createConnectionGate(limits: ConnectionLimits, clients: ClientAddresses = createClientAddresses()): ConnectionGate {
  const byAddress = new Map<string, number>();
  let open = 0;
  const refuse = (socket: Socket, cap: RefusedCap) => {
    // An RST frees the descriptor now (no FIN handshake, no TIME_WAIT here).
    socket.on("error", () => {});
    socket.resetAndDestroy();
    limits.onRefused?.(cap);
    return false;
  };
  const admitClient = (socket: Socket) => {
    const key = clients.limitKeyOf(socket);
    const count = byAddress.get(key) ?? 0;
    if (count >= limits.perAddress) return refuse(socket, "per_address");
    byAddress.set(key, count + 1);
    socket.once("close", () => {
      const left = (byAddress.get(key) ?? 1) - 1;
      if (left === 0) byAddress.delete(key);
      else byAddress.set(key, left);
    });
    return true;
  };
  return {
    admit(socket) {
      if (open >= limits.total) return refuse(socket, "total");
      if (!clients.proxyProtocol && !admitClient(socket)) return false;
      open++;
      socket.once("close", () => open--);
      return true;
    },
    admitClient,
  };
}
