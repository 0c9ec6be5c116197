/**
 * A delivery process for the end-to-end tests: opens the store a test
 * server serves, runs a deliverer over it (src/delivery/deliverer.ts) and
 * prints "ready". SIGTERM stops it gracefully; tests kill -9 it to prove a
 * lost process's delivery is made by another. Options come as JSON in
 * DELIVERY_WORKER.
 */
import { CapabilitySchema, type Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { createAuthorizer } from "../../src/auth/authorizer.js";
import { TokenService } from "../../src/auth/tokens.js";
import { createDeliverer } from "../../src/delivery/deliverer.js";
import { openStore } from "../../src/store/open.js";

interface WorkerOptions {
  databaseUrl: string;
  dataDir: string;
  issuer: string;
  audience: string;
  source: string;
  owner: string;
  leaseMs: number;
  pollMs: number;
  sinkTimeoutMs: number;
  retryMs: number;
}

const o = JSON.parse(process.env.DELIVERY_WORKER ?? "{}") as WorkerOptions;
const store = await openStore({ databaseUrl: o.databaseUrl, dataDir: o.dataDir, maxConnections: 4 });
const tokens = await TokenService.open(store.keys, { issuer: o.issuer, audience: o.audience });
const all = CapabilitySchema.values.map((v) => v.number as Capability).filter((c) => c !== 0);
const deliverer = createDeliverer({
  store,
  authz: createAuthorizer(store, all),
  tokens,
  source: o.source,
  policy: { allowLoopback: true },
  now: Date.now,
  owner: o.owner,
  leaseMs: o.leaseMs,
  pollMs: o.pollMs,
  sinkTimeoutMs: o.sinkTimeoutMs,
  retry: (_attempts, _first, now) => ({ at: now + o.retryMs }),
  onError: (err) => process.stderr.write(`delivery error: ${String(err)}\n`),
});
deliverer.start();
// The deliverer's timers do not hold a process open (a server's listener does): this one has nothing else.
const alive = setInterval(() => {}, 1 << 30);
process.stdout.write("ready\n");
process.on("SIGTERM", () => {
  clearInterval(alive);
  void deliverer
    .stop()
    .then(() => store.close())
    .then(() => process.exit(0));
});
