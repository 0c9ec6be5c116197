import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponse_ServingStatus as ServingStatus,
  type HealthCheckResponse,
  type HealthListResponse,
} from "../../gen/grpc/health/v1/health_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import { testTransport } from "../support/connect.js";
import { grpcClient, type GrpcTestClient } from "../support/grpc.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";

const GROUPS = "platformapi.iam.v2beta1.GroupsService";

let srv: TestServer;
let health: GrpcTestClient;

before(async () => {
  srv = await startTestServer();
  health = grpcClient(Health, srv.port);
});
after(async () => {
  health.close();
  await srv.close(); // idempotent: the Watch test below has already started it
});

/** Health/Watch as a grpc-js server stream, read one message at a time. */
function watch(port: number, service: string) {
  const definition = { watch: methodDefinition(Health, Health.method.watch) } as grpc.ServiceDefinition;
  const Client = grpc.makeGenericClientConstructor(definition, Health.typeName);
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = (client as unknown as { watch(req: unknown): grpc.ClientReadableStream<HealthCheckResponse> }).watch(
    create(HealthCheckRequestSchema, { service }),
  );
  let ended: grpc.ServiceError | undefined;
  call.on("error", (err: grpc.ServiceError) => void (ended = err));
  const messages = call[Symbol.asyncIterator]() as AsyncIterator<HealthCheckResponse>;
  return {
    async next(): Promise<ServingStatus> {
      const r = await messages.next();
      assert.ok(!r.done, `watch ended early: ${ended?.message}`);
      return r.value.status;
    },
    stop() {
      call.cancel();
      client.close();
    },
  };
}

test('Check of the whole server ("") is SERVING', async () => {
  const res: HealthCheckResponse = await health.call("check", { service: "" });
  assert.equal(res.status, ServingStatus.SERVING);
});

test(`Check of ${GROUPS} is SERVING`, async () => {
  const res: HealthCheckResponse = await health.call("check", { service: GROUPS });
  assert.equal(res.status, ServingStatus.SERVING);
});

test("Check of an unknown service is NOT_FOUND", async () => {
  await assert.rejects(health.call("check", { service: "no.such.Service" }), (err: grpc.ServiceError) => {
    assert.equal(err.code, grpc.status.NOT_FOUND);
    return true;
  });
});

test("List reports the server and every API service as SERVING", async () => {
  const res: HealthListResponse = await health.call("list", {});
  const statuses = Object.fromEntries(Object.entries(res.statuses).map(([name, r]) => [name, r.status]));
  assert.equal(statuses[""], ServingStatus.SERVING);
  assert.equal(statuses[GROUPS], ServingStatus.SERVING);
  assert.equal(statuses["platformapi.iam.v1.GroupsService"], ServingStatus.SERVING);
  assert.equal(statuses["no.such.Service"], undefined);
});

test("Watch of an unknown service reports SERVICE_UNKNOWN", async () => {
  const w = watch(srv.port, "no.such.Service");
  try {
    assert.equal(await w.next(), ServingStatus.SERVICE_UNKNOWN);
  } finally {
    w.stop();
  }
});

test("GET /healthz and /readyz answer 200 while serving", async () => {
  const live = await rest(srv.url, "GET", "/healthz");
  assert.equal(live.status, 200);
  assert.deepEqual(live.body, { status: "ok" });
  const ready = await rest(srv.url, "GET", "/readyz");
  assert.equal(ready.status, 200);
  assert.deepEqual(ready.body, { status: "ready" });
});

test("Connect and gRPC-Web serve the same Health: Check, NOT_FOUND for an unknown service, List", async () => {
  for (const kind of ["connect-h1", "grpc-web-h1"] as const) {
    const t = testTransport(kind, srv.url);
    try {
      const client = createClient(Health, t.transport);
      assert.equal((await client.check({ service: GROUPS })).status, ServingStatus.SERVING, kind);
      await assert.rejects(client.check({ service: "no.such.Service" }), (err: unknown) => ConnectError.from(err).code === Code.NotFound);
      const list = await client.list({});
      assert.equal(list.statuses[""]?.status, ServingStatus.SERVING, kind);
      assert.equal(list.statuses[GROUPS]?.status, ServingStatus.SERVING, kind);
    } finally {
      t.close();
    }
  }
});

// Last: it shuts the server down.
test("Watch sends SERVING, then NOT_SERVING once the server starts shutting down", async () => {
  const server = watch(srv.port, "");
  const groups = watch(srv.port, GROUPS);
  try {
    assert.equal(await server.next(), ServingStatus.SERVING);
    assert.equal(await groups.next(), ServingStatus.SERVING);
    const closing = srv.close();
    assert.equal(await server.next(), ServingStatus.NOT_SERVING);
    assert.equal(await groups.next(), ServingStatus.NOT_SERVING);
    server.stop();
    groups.stop();
    await closing;
  } finally {
    server.stop();
    groups.stop();
  }
});
