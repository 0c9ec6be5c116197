/**
 * Tracing off (no OTEL_EXPORTER_OTLP_* variable, or OTEL_SDK_DISABLED=true):
 * nothing of OpenTelemetry's SDK is loaded, nothing is registered with its
 * API, and outbound requests carry no traceparent, even when the caller sent
 * one. (prom-client loads @opentelemetry/api for its exemplars whatever we
 * do: that package alone is allowed.)
 */
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { after, before, test } from "node:test";
import { startEventReceiver, type EventReceiver } from "../support/event-receiver.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

let sinks: EventReceiver | undefined;
const servers: TestServer[] = [];

before(() => {
  for (const name of Object.keys(process.env)) if (name.startsWith("OTEL_")) delete process.env[name];
});
after(async () => {
  await sinks?.close();
  for (const srv of servers) await srv.close();
});

/** The @opentelemetry/* packages loaded in this process (CommonJS, as they all are), by package name. */
function loadedOtelPackages(): string[] {
  const names = Object.keys(createRequire(import.meta.url).cache)
    .map((file) => /node_modules\/(@opentelemetry\/[^/]+)\//.exec(file)?.[1])
    .filter((name): name is string => name !== undefined);
  return [...new Set(names)].sort();
}

/** Asserts that only @opentelemetry/api is loaded and nothing is registered with it. */
function assertNothingLoaded(): void {
  const loaded = loadedOtelPackages();
  assert.deepEqual(
    loaded.filter((name) => name !== "@opentelemetry/api"),
    [],
    `loaded: ${loaded.join(", ")}`,
  );
  // What @opentelemetry/api keeps process-wide: nothing registered (no context manager, tracer provider or propagator).
  const registered = (globalThis as Record<symbol, Record<string, unknown> | undefined>)[Symbol.for("opentelemetry.js.api.1")];
  assert.deepEqual(
    Object.keys(registered ?? {}).filter((k) => k !== "version"),
    [],
  );
}

/** A call with a traceparent and the delivery it causes; the delivery carries none. */
async function callAndDeliver(srv: TestServer, name: string): Promise<void> {
  sinks ??= await startEventReceiver(srv);
  const traceparent = `00-${"ab".repeat(16)}-${"cd".repeat(8)}-01`;
  const org = await createGroup(srv.url, null, `${name} org`);
  const sink = sinks.sink(name);
  const created = await rest(srv.url, "POST", `/events/v1/subscriptions/${org.uid}`, { sink: sink.url, types: [] });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  sink.secret = created.body.secret;
  const res = await rest(srv.url, "POST", `/iam/v2beta1/groups/${org.uid}`, { name: "child" }, { traceparent });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const [delivery] = await sink.waitForDeliveries(1);
  assert.equal(delivery!.headers.traceparent, undefined, "a delivery carries no traceparent");
}

test("with no OTEL variable, calls and deliveries are served and no SDK module or context manager is loaded", async () => {
  const srv = await startTestServer({ env: { PLATFORM_DELIVERY_POLL_MS: "50" } });
  servers.push(srv);
  await callAndDeliver(srv, "untraced");
  assertNothingLoaded();
});

test("OTEL_SDK_DISABLED=true wins over an endpoint: nothing is loaded either", async () => {
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = "http://127.0.0.1:9";
  process.env.OTEL_SDK_DISABLED = "true";
  try {
    // The sinks' JWKS is the first server's: this one's deliveries fail their token check, and still arrive.
    const srv = await startTestServer({ env: { PLATFORM_DELIVERY_POLL_MS: "50" } });
    servers.push(srv);
    await callAndDeliver(srv, "disabled");
  } finally {
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    delete process.env.OTEL_SDK_DISABLED;
  }
  assertNothingLoaded();
});
