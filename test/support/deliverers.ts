import type { ChildProcess } from "node:child_process";
import { CapabilitySchema, type Capability } from "../../gen/platformapi/capabilities/v1/capabilities_pb.js";
import { createAuthorizer } from "../../src/auth/authorizer.js";
import { createDeliverer, type Deliverer, type DelivererOptions } from "../../src/delivery/deliverer.js";
import type { Store } from "../../src/store/store.js";
import { cleanEnv, startChild } from "./child-process.js";
import type { TestServer } from "./server.js";

const ALL = CapabilitySchema.values.map((v) => v.number as Capability).filter((c) => c !== 0);

/** A deliverer in this process over its own store on the server's data (as another process would open it). */
export interface TestDeliverer {
  deliverer: Deliverer;
  store: Store;
  stop(): Promise<void>;
}

/**
 * Starts a deliverer over a second store of srv's data, signing with srv's
 * keys, loopback sinks allowed; decorate may wrap the store's parts first.
 */
export async function startTestDeliverer(
  srv: TestServer,
  opts: Partial<DelivererOptions> = {},
  decorate: (store: Store) => void = () => {},
): Promise<TestDeliverer> {
  const store = await srv.openStore();
  decorate(store);
  const deliverer = createDeliverer({
    store,
    authz: createAuthorizer(store, ALL),
    tokens: srv.server.tokens,
    source: "http://api.test",
    policy: { allowLoopback: true },
    now: Date.now,
    pollMs: 50,
    ...opts,
  });
  deliverer.start();
  return {
    deliverer,
    store,
    async stop() {
      await deliverer.stop();
      await store.close();
    },
  };
}

/** A deliverer in a child process (test/support/delivery-worker.ts). */
export interface WorkerProcess {
  child: ChildProcess;
  output(): string;
  /** SIGKILL: nothing is cleaned up, its leases expire. */
  kill(): Promise<void>;
  /** SIGTERM: a graceful stop. */
  stop(): Promise<void>;
}

/** Spawns a delivery worker on srv's data; resolves once it is delivering. */
export async function spawnDeliveryWorker(
  srv: TestServer,
  opts: { owner: string; leaseMs: number; sinkTimeoutMs?: number; retryMs?: number },
): Promise<WorkerProcess> {
  const config = {
    databaseUrl: srv.databaseUrl,
    dataDir: srv.dataDir,
    issuer: srv.server.tokens.issuer,
    audience: "http://api.test",
    source: "http://api.test",
    owner: opts.owner,
    leaseMs: opts.leaseMs,
    pollMs: 50,
    sinkTimeoutMs: opts.sinkTimeoutMs ?? 60_000,
    retryMs: opts.retryMs ?? 50,
  };
  const run = startChild([process.execPath, "--import", "tsx", "test/support/delivery-worker.ts"], {
    env: cleanEnv({ DELIVERY_WORKER: JSON.stringify(config) }),
  });
  try {
    await run.waitFor(/^ready$/m, "stdout");
  } catch (err) {
    run.kill("SIGKILL");
    throw err;
  }
  const gone = async (signal: NodeJS.Signals) => {
    run.kill(signal);
    await run.exited;
  };
  return { child: run.child, output: run.output, kill: () => gone("SIGKILL"), stop: () => gone("SIGTERM") };
}
