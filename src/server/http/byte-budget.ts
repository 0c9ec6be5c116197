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

/**
 * The smallest process-wide budget by default, and how many of the largest
 * messages it holds when that is more: four connections' full budgets
 * (16 MiB each) at the default 4 MiB message limit, and sixteen uploads of
 * the largest message at once above it. An IAM API's messages are mostly
 * under a kilobyte and a message is counted only while it is arriving, so
 * legitimate traffic stays far below; an attacker's share is bounded memory.
 */
const MIN_DEFAULT_PENDING_REQUEST_BYTES = 64 * 1024 * 1024;
const DEFAULT_PENDING_REQUEST_MESSAGES = 16;
/** One address may hold a quarter of the total by default: one connection's budget, so filling the process takes four addresses. */
const DEFAULT_PENDING_ADDRESS_SHARE = 4;

/** The default process-wide budget for a message limit: max(64 MiB, 16 × the limit). */
export function defaultPendingRequestBytes(maxMessageBytes: number): number {
  return Math.max(MIN_DEFAULT_PENDING_REQUEST_BYTES, DEFAULT_PENDING_REQUEST_MESSAGES * maxMessageBytes);
}

/** The default share of one address: a quarter of the total. */
export function defaultPendingRequestBytesPerAddress(total: number): number {
  return Math.floor(total / DEFAULT_PENDING_ADDRESS_SHARE);
}

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
