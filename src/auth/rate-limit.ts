/** Counts failures per caller and refuses a caller that failed too often lately. */
export interface FailureLimiter {
  /** True while key has `limit` failures within the last window. */
  blocked(key: string): boolean;
  /** Records one failure of key. */
  recordFailure(key: string): void;
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
 * window old. Memory is bounded by maxKeys × limit numbers.
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

  function makeRoom(now: number): void {
    for (const key of failures.keys()) {
      if (failures.size < maxKeys) return;
      if (recent(key, now).length === 0) failures.delete(key);
    }
    // Still full of live entries: forget the least recently failing caller.
    while (failures.size >= maxKeys) failures.delete(failures.keys().next().value!);
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
      if (failures.size >= maxKeys) makeRoom(now);
      // Re-inserted last: Map order is then least recently failing first.
      failures.set(key, times.slice(-opts.limit));
    },
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
