import type { ContextValues } from "@connectrpc/connect";
import { ResourceExhaustedError } from "../domain/errors.js";
import { clientAddressKey } from "./principal.js";

/** Counts failures per caller and refuses a caller that failed too often lately. */
export interface FailureLimiter {
  /** True while key has `limit` failures within the last window. */
  blocked(key: string): boolean;
  /** Records one failure of key. */
  recordFailure(key: string): void;
  /** Callers held now (at most maxKeys), for the memory bound. */
  size(): number;
}

/** How a FailureLimiter counts. */
export interface FailureLimiterOptions {
  /** Failures within the window that block the caller. */
  limit: number;
  windowMs: number;
  /** Milliseconds since the epoch; injectable for tests. */
  now: () => number;
  /** Callers remembered at most; the least recently failing are forgotten first. */
  maxKeys?: number;
}

/**
 * An in-memory sliding-window limiter: it keeps the times of each caller's
 * last `limit` failures, so a caller is blocked until the oldest of them is a
 * window old. Memory is bounded by maxKeys × limit numbers (measured: the
 * invite limits, 100,000 callers at 10 and 100,000 addresses at 30, hold
 * about 61 MiB), and a failure costs O(limit), however full the map.
 */
export function createFailureLimiter(opts: FailureLimiterOptions): FailureLimiter {
  const maxKeys = opts.maxKeys ?? 100_000;
  const failures = new Map<string, number[]>();

  /** The failure times of key still inside the window. */
  function recent(key: string, now: number): number[] {
    const times = failures.get(key);
    if (!times) return [];
    const live = times.filter((t) => t > now - opts.windowMs);
    if (live.length === 0) failures.delete(key);
    return live;
  }

  /**
   * Forgets the least recently failing callers until there is room. Map
   * order is least recently failing first, so the front is the oldest (and
   * any caller whose failures all left the window is there): one deletion
   * per new caller, never a scan of the whole map.
   */
  function makeRoom(): void {
    for (const key of failures.keys()) {
      if (failures.size < maxKeys) return;
      failures.delete(key);
    }
  }

  return {
    blocked(key) {
      return recent(key, opts.now()).length >= opts.limit;
    },
    recordFailure(key) {
      const now = opts.now();
      const times = recent(key, now);
      times.push(now);
      failures.delete(key);
      if (failures.size >= maxKeys) makeRoom();
      // Re-inserted last: Map order is then least recently failing first.
      failures.set(key, times.slice(-opts.limit));
    },
    size: () => failures.size,
  };
}

/** How an AttemptLimiter counts, and what it counts. */
export interface AttemptLimiterOptions {
  /** Failures one caller may have within the window before its further failures are refused. */
  perCaller: number;
  /** Failures one client address (addressKey) may have within the window, over all its callers. */
  perAddress: number;
  windowMs: number;
  now: () => number;
  /** Which errors of an attempt are failures to count (a wrong code), as opposed to the server's own trouble. */
  isFailure: (err: unknown) => boolean;
  /** The RESOURCE_EXHAUSTED message a failure past a limit gets. */
  refusal: string;
  /** Callers, and addresses, remembered at most by each count. */
  maxKeys?: number;
  /** Told of each refusal, with the limit that was reached (the caller's first when both were): metrics. */
  onRefused?: (reason: "per_caller" | "per_address") => void;
}

/** Limits the failures of one kind of attempt (redeeming an invite code) per caller and per client address. */
export interface AttemptLimiter {
  /**
   * Runs attempt for caller, who calls from the client address the request
   * context holds (clientAddressKey). Its result is returned whatever the
   * counts: only a failure is limited, and a failure past either limit is
   * ResourceExhaustedError instead of its own error.
   */
  attempt<T>(values: ContextValues, caller: string, attempt: () => Promise<T>): Promise<T>;
  /** Callers and addresses held now, at most 2 × maxKeys, for the memory bound. */
  size(): number;
}

/**
 * Every attempt is judged, even past a limit: a secret guessed only by brute
 * force (a 256-bit invite code) needs its failures slowed, not its successes,
 * and refusing a valid code because of the failure count would let anyone on
 * a shared address (a NAT, a proxy's clients) lock everyone else out. The
 * address comes from the one value every entry point sets, clientAddressKey,
 * so it is the real client's wherever an entry point learns that (trusted
 * proxies).
 */
export function createAttemptLimiter(opts: AttemptLimiterOptions): AttemptLimiter {
  const common = { windowMs: opts.windowMs, now: opts.now, maxKeys: opts.maxKeys };
  const callers = createFailureLimiter({ ...common, limit: opts.perCaller });
  const addresses = createFailureLimiter({ ...common, limit: opts.perAddress });
  return {
    async attempt(values, caller, attempt) {
      try {
        return await attempt();
      } catch (err) {
        if (!opts.isFailure(err)) throw err;
        const peer = values.get(clientAddressKey);
        const address = peer === "" ? null : addressKey(peer);
        const limited = callers.blocked(caller) ? "per_caller" : address !== null && addresses.blocked(address) ? "per_address" : null;
        callers.recordFailure(caller);
        if (address !== null) addresses.recordFailure(address);
        if (limited !== null) {
          opts.onRefused?.(limited);
          throw new ResourceExhaustedError(opts.refusal);
        }
        throw err;
      }
    },
    size: () => callers.size() + addresses.size(),
  };
}

/**
 * The key a per-address limit counts under: an IPv4 address as it is (also
 * when written IPv4-mapped), an IPv6 address by its /64 prefix, since one
 * subscriber commonly holds a whole /64 and could otherwise rotate through it.
 */
export function addressKey(peer: string): string {
  const address = peer.split("%")[0]!;
  const v4 = /^(?:::ffff:)?(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (v4) return v4[1]!;
  if (!address.includes(":")) return address;
  const [head = "", tail = ""] = address.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === "" ? [] : tail.split(":");
  const groups = address.includes("::") ? [...left, ...Array<string>(8 - left.length - right.length).fill("0"), ...right] : left;
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, "").toLowerCase())
    .join(":")}::/64`;
}

/** How a CallRateLimiter counts. */
export interface CallRateLimiterOptions {
  /** Calls per second each caller may make, sustained. */
  perSecond: number;
  /** Calls a caller who has been quiet may make at once (the bucket's size). */
  burst: number;
  /** Milliseconds (any monotonic clock); injectable for tests. */
  now: () => number;
  /** Callers remembered at most; the least recently calling are forgotten first. */
  maxKeys?: number;
}

/** Limits the calls of each caller to a steady rate with a burst (a token bucket per caller). */
export interface CallRateLimiter {
  /**
   * Takes one call from caller's bucket: 0 when the call may go ahead, else
   * the milliseconds until the next one may (nothing is taken then, so a
   * caller retrying too fast is not pushed further back).
   */
  take(caller: string): number;
  /** Callers held now (at most maxKeys), for the memory bound. */
  size(): number;
}

/**
 * A token bucket per caller, refilled at perSecond and holding at most burst:
 * a caller who keeps under the rate is never refused, one who calls faster
 * gets the rate and nothing more. Each bucket is two numbers; a call costs two
 * Map operations (taken and re-inserted, so Map order is least recently
 * calling first and forgetting the front forgets whoever has been quiet
 * longest, whose bucket is full or nearly so).
 */
export function createCallRateLimiter(opts: CallRateLimiterOptions): CallRateLimiter {
  const maxKeys = opts.maxKeys ?? 100_000;
  const perMs = opts.perSecond / 1000;
  const buckets = new Map<string, { tokens: number; at: number }>();
  return {
    take(caller) {
      const now = opts.now();
      let bucket = buckets.get(caller);
      if (bucket === undefined) {
        for (const key of buckets.keys()) {
          if (buckets.size < maxKeys) break;
          buckets.delete(key);
        }
        bucket = { tokens: opts.burst, at: now };
      } else {
        buckets.delete(caller);
        bucket.tokens = Math.min(opts.burst, bucket.tokens + (now - bucket.at) * perMs);
        bucket.at = now;
      }
      buckets.set(caller, bucket);
      if (bucket.tokens >= 1) {
        bucket.tokens -= 1;
        return 0;
      }
      return Math.ceil((1 - bucket.tokens) / perMs);
    },
    size: () => buckets.size,
  };
}
