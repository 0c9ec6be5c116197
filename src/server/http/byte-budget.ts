/**
 * How many bytes of request messages not yet complete the process may hold
 * at once, over every connection, and how much of that one client address may
 * take. grpc-js reads a whole message before any handler (and so before
 * authentication) sees it, so without this the connection caps multiply the
 * per-connection budget: 896 connections × 16 MiB ≈ 14 GiB held for clients
 * nobody has authenticated.
 */
export interface ByteBudgetLimits {
  /** Bytes held at most over the whole process. */
  total: number;
  /** Bytes held at most for one client address (an IPv6 /64 counting as one; see addressLimitKey). */
  perAddress: number;
}

/** Which share a take would exceed: the process's or the client address's. */
export type ByteBudgetScope = "server" | "address";

/** Bytes taken and released by holders keyed by client address; all-or-nothing, never negative. */
export interface ByteBudget {
  readonly limits: ByteBudgetLimits;
  /** Bytes held now over every address (the platform_pending_request_bytes gauge). */
  readonly held: number;
  /** Bytes held now for one address key (0 when it holds none). */
  heldBy(key: string): number;
  /**
   * Takes `bytes` for `key` when both the total and the key's share allow it
   * and returns undefined; else takes nothing and returns the share that
   * would be exceeded (the server's first, as that is what the caller can
   * least do anything about).
   */
  take(key: string, bytes: number): ByteBudgetScope | undefined;
  /** Gives back bytes taken for `key` before; a key holding nothing is forgotten, so the map holds only current holders. */
  release(key: string, bytes: number): void;
}

/** A budget over these limits. */
export function createByteBudget(limits: ByteBudgetLimits): ByteBudget {
  const byKey = new Map<string, number>();
  let held = 0;
  return {
    limits,
    get held() {
      return held;
    },
    heldBy: (key) => byKey.get(key) ?? 0,
    take(key, bytes) {
      if (held + bytes > limits.total) return "server";
      const mine = byKey.get(key) ?? 0;
      if (mine + bytes > limits.perAddress) return "address";
      held += bytes;
      byKey.set(key, mine + bytes);
      return undefined;
    },
    release(key, bytes) {
      const mine = byKey.get(key) ?? 0;
      const given = Math.min(bytes, mine);
      held -= given;
      if (mine - given === 0) byKey.delete(key);
      else byKey.set(key, mine - given);
    },
  };
}
