import { subscribe, unsubscribe } from "node:diagnostics_channel";
import type { FastifyBaseLogger } from "fastify";
import { REACHABILITY_CHANNEL, type ReachabilityReport } from "../../store/postgres/tx.js";

/**
 * Logs the outages of the database at `location` (StoreDescription.location)
 * as its store reports them (REACHABILITY_CHANNEL): one warn line naming the
 * cause when it becomes unusable, one info line when it answers again.
 * Returns the function that stops logging them.
 */
export function logDatabaseOutages(log: () => FastifyBaseLogger, location: string): () => void {
  const onReport = (message: unknown) => {
    const report = message as ReachabilityReport;
    // Other stores of this process (tests, several servers) report on the same channel.
    if (report.location !== location) return;
    if (report.state === "unreachable") {
      const { cause, code } = report.failure;
      log().warn(
        { database: location, cause, code },
        `database unreachable: ${cause}; calls answer UNAVAILABLE and /readyz 503 until it answers again (probed every second)`,
      );
    } else {
      log().info({ database: location, downMs: report.downMs }, `database reachable again after ${report.downMs} ms`);
    }
  };
  subscribe(REACHABILITY_CHANNEL, onReport);
  return () => void unsubscribe(REACHABILITY_CHANNEL, onReport);
}
