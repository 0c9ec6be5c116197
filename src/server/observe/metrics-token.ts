import { createHash, timingSafeEqual } from "node:crypto";

/**
 * Whether an Authorization header may read /metrics: always when no metrics
 * token is configured (the PLATFORM_METRICS_ADDR listener; the public port
 * asks publicPortMetrics first and is private then), else only
 * "Bearer <token>". Both sides are hashed
 * first, so the comparison takes the same time whatever the length or the
 * first differing byte of a guess.
 */
export function metricsTokenMatches(authorization: string | undefined, token: string): boolean {
  if (token === "") return true;
  const m = /^Bearer (\S+)$/i.exec(authorization ?? "");
  const digest = (s: string) => createHash("sha256").update(s).digest();
  return timingSafeEqual(digest(m?.[1] ?? ""), digest(token)) && m !== null;
}
