/**
 * Events figures (issue 23): how long a committed change takes to reach a
 * WatchEvents stream, and how many events per second the server's own
 * deliverer posts to one local sink. The real server in this process, on
 * SQLite, or on a throwaway PostgreSQL cluster with fsync on
 * (BENCH_BACKEND=postgres). Figures, not assertions: this machine is shared.
 *
 *   npx tsx bench/events.ts                          # SQLite
 *   BENCH_BACKEND=postgres npx tsx bench/events.ts   # PostgreSQL
 *   BENCH_EVENTS=2000 BENCH_WATCH_SAMPLES=300 …      # sizes
 *   BENCH_SCALE=off                                  # without the rows at scale (bench/deliveries-scale.ts)
 *   BENCH_POOL=40                                    # PLATFORM_DATABASE_POOL_SIZE of the server (PostgreSQL)
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { performance } from "node:perf_hooks";
import { createGroup, rest, startTestServer } from "../test/support/server.js";
import { deliveriesAtScale } from "./deliveries-scale.js";

const BACKEND = process.env.BENCH_BACKEND === "postgres" ? "postgres" : "sqlite";
const EVENTS = Number(process.env.BENCH_EVENTS ?? 2000);
const WATCH_SAMPLES = Number(process.env.BENCH_WATCH_SAMPLES ?? 300);

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** A sink that accepts everything and counts what it got (the bench measures the deliverer, not the sink). */
async function countingSink(): Promise<{
  url: string;
  received: () => number;
  close: () => Promise<void>;
  waitFor: (n: number) => Promise<void>;
}> {
  let received = 0;
  const waiters: { n: number; resolve: () => void }[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      received++;
      res.writeHead(204).end();
      for (const w of waiters.filter((w) => received >= w.n)) w.resolve();
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/sink`,
    received: () => received,
    waitFor: (n) => (received >= n ? Promise.resolve() : new Promise((resolve) => waiters.push({ n, resolve }))),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** A create acknowledged → its event received on a REST watch (one JSON line per event), one change at a time. */
async function watchLatency(url: string, token: string, org: string): Promise<number[]> {
  const controller = new AbortController();
  // The answer's headers come with the first event: the watch is asked for, then the first change made.
  // From the feed's position now (ListEvents from a time after every event says where), so the first change is in it.
  const later = new Date(Date.now() + 3_600_000).toISOString();
  const horizon = (await rest(url, "GET", `/events/v1/events?start_time=${later}`)).body.nextPageToken as string;
  const response = fetch(`${url}/events/v1/events:watch?uidp.descendants_of=${org}&cursor=${horizon}`, {
    headers: { authorization: `Bearer ${token}` },
    signal: controller.signal,
  });
  await createGroup(url, org, "first change");
  const reader = (await response).body!.getReader();
  const decoder = new TextDecoder();
  let buffered = "";
  const nextLine = async (): Promise<string> => {
    for (;;) {
      const newline = buffered.indexOf("\n");
      if (newline >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        return line;
      }
      const { value, done } = await reader.read();
      if (done) throw new Error("the watch ended");
      buffered += decoder.decode(value, { stream: true });
    }
  };
  await nextLine();
  const samples: number[] = [];
  for (let i = 0; i < WATCH_SAMPLES; i++) {
    // From the create's answer (its commit is acknowledged) to the event's line; 0 when the line came first.
    let answered = 0;
    const created = createGroup(url, org, `watched ${i}`).then(() => (answered = performance.now()));
    await nextLine();
    const received = performance.now();
    await created;
    samples.push(Math.max(0, received - answered));
  }
  controller.abort();
  return samples.sort((a, b) => a - b);
}

async function main(): Promise<void> {
  const srv = await startTestServer({
    backend: BACKEND,
    env: {
      PLATFORM_DELIVERY_POLL_MS: "1000",
      PLATFORM_CALLS_PER_IDENTITY: "0",
      ...(process.env.BENCH_POOL ? { PLATFORM_DATABASE_POOL_SIZE: process.env.BENCH_POOL } : {}),
    },
  });
  const sink = await countingSink();
  try {
    const watched = (await createGroup(srv.url, null, "watched")).uid;
    const latency = await watchLatency(srv.url, srv.adminToken, watched);

    // Deliveries: EVENTS changes are committed first with no subscription able to see them yet…
    const org = (await createGroup(srv.url, null, "delivered")).uid;
    const sub = await rest(srv.url, "POST", `/events/v1/subscriptions/${org}`, { sink: sink.url });
    if (sub.status !== 200) throw new Error(`subscription: ${JSON.stringify(sub.body)}`);
    // …then written as fast as 16 clients can, and the clock runs until the sink has them all.
    const started = performance.now();
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < EVENTS) await createGroup(srv.url, org, `delivered ${next++}`);
      }),
    );
    const written = performance.now() - started;
    await sink.waitFor(EVENTS);
    const delivered = performance.now() - started;
    console.log(`Events (${BACKEND}), node ${process.version}`);
    console.log(
      `  watch, a create's answer → its event's line (REST stream, ${WATCH_SAMPLES} changes one at a time; 0 when the line came first): p50 ${percentile(latency, 50).toFixed(2)} ms, p99 ${percentile(latency, 99).toFixed(2)} ms`,
    );
    console.log(
      `  deliveries to one local sink: ${EVENTS} events written in ${(written / 1000).toFixed(2)} s (${Math.round(EVENTS / (written / 1000))} creates/s), all delivered after ${(delivered / 1000).toFixed(2)} s: ${Math.round(EVENTS / (delivered / 1000))} events/s delivered`,
    );
    if (process.env.BENCH_SCALE !== "off") await deliveriesAtScale(srv, BACKEND);
  } finally {
    await sink.close();
    await srv.close();
  }
}

await main();
