/**
 * Issue 21, item 9: a call whose deadline has passed is refused before its
 * handler runs, on every protocol path, so a write never commits for a
 * client that has stopped waiting; and a call's AbortSignal aborts at its
 * deadline on every path (the Connect fast path, connect-node, native gRPC),
 * so a handler that honours it stops.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import * as grpc from "@grpc/grpc-js";
import { CreateGroupRequestSchema, GroupsService } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { methodDefinition } from "../../src/server/grpc/adapter.js";
import type { StoreParts } from "../../src/store/store.js";
import { frame, parseFrames } from "../support/grpc-web-frames.js";
import { rest, startTestServer, type TestServer } from "../support/server.js";

const CREATE_GROUP = `/${GroupsService.typeName}/CreateGroup`;

/** CreateGroup over native gRPC with the given deadline; resolves with the status code. */
function grpcCreate(srv: TestServer, name: string, deadline: number): Promise<grpc.status> {
  const method = GroupsService.method.createGroup;
  const Ctor = grpc.makeGenericClientConstructor({ createGroup: methodDefinition(GroupsService, method) }, GroupsService.typeName);
  const client = new Ctor(`127.0.0.1:${srv.port}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  md.set("authorization", `Bearer ${srv.adminToken}`);
  return new Promise((resolve) => {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    (client as any).createGroup(
      create(CreateGroupRequestSchema, { group: { name } }),
      md,
      { deadline },
      (err: grpc.ServiceError | null) => {
        client.close();
        resolve(err ? err.code : grpc.status.OK);
      },
    );
  });
}

/** CreateGroup over the Connect fast path (plain JSON POST) with connect-timeout-ms; resolves with the Connect code. */
async function connectCreate(srv: TestServer, name: string, timeoutMs: number, extra: Record<string, string> = {}): Promise<string> {
  const res = await fetch(`${srv.url}${CREATE_GROUP}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "connect-timeout-ms": String(timeoutMs),
      authorization: `Bearer ${srv.adminToken}`,
      ...extra,
    },
    body: JSON.stringify({ group: { name } }),
  });
  const body = (await res.json()) as { code?: string };
  return res.status === 200 ? "ok" : (body.code ?? String(res.status));
}

/** CreateGroup over gRPC-Web (connect-node) with grpc-timeout; resolves with the gRPC status code. */
async function grpcWebCreate(srv: TestServer, name: string, grpcTimeout: string): Promise<number> {
  const message = create(CreateGroupRequestSchema, { group: { name } });
  const { toBinary } = await import("@bufbuild/protobuf");
  const res = await fetch(`${srv.url}${CREATE_GROUP}`, {
    method: "POST",
    headers: { "content-type": "application/grpc-web+proto", "grpc-timeout": grpcTimeout, authorization: `Bearer ${srv.adminToken}` },
    body: new Uint8Array(frame(0, toBinary(CreateGroupRequestSchema, message))),
  });
  const { trailers } = parseFrames(Buffer.from(await res.arrayBuffer()));
  return Number(res.headers.get("grpc-status") ?? trailers.get("grpc-status"));
}

/** The names of the organizations that exist. */
async function orgNames(srv: TestServer): Promise<string[]> {
  const res = await rest(srv.url, "GET", "/iam/v2beta1/groups");
  assert.equal(res.status, 200);
  return ((res.body.groups ?? []) as { name: string }[]).map((g) => g.name);
}

describe("a deadline already passed is refused before the handler: nothing is created", () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer();
  });
  after(async () => {
    await srv.close();
  });

  test("Connect fast path, connect-timeout-ms 0: DEADLINE_EXCEEDED and no group", async () => {
    assert.equal(await connectCreate(srv, "connect-0ms", 0), "deadline_exceeded");
    assert.ok(!(await orgNames(srv)).includes("connect-0ms"));
  });

  test("native gRPC, a deadline of now: DEADLINE_EXCEEDED and no group", async () => {
    assert.equal(await grpcCreate(srv, "grpc-0ms", Date.now()), grpc.status.DEADLINE_EXCEEDED);
    // grpc-js answers DEADLINE_EXCEEDED itself at the deadline; give a handler that ran anyway time to commit.
    await new Promise((r) => setTimeout(r, 300));
    assert.ok(!(await orgNames(srv)).includes("grpc-0ms"));
  });

  test("gRPC-Web (connect-node), grpc-timeout 0: DEADLINE_EXCEEDED and no group", async () => {
    assert.equal(await grpcWebCreate(srv, "grpc-web-0ms", "0m"), Code.DeadlineExceeded);
    assert.ok(!(await orgNames(srv)).includes("grpc-web-0ms"));
  });

  test("with a generous deadline each path creates its group", async () => {
    assert.equal(await connectCreate(srv, "connect-60s", 60_000), "ok");
    assert.equal(await grpcCreate(srv, "grpc-60s", Date.now() + 60_000), grpc.status.OK);
    assert.equal(await grpcWebCreate(srv, "grpc-web-60s", "60S"), 0, "grpc-status 0 (OK)");
    const names = await orgNames(srv);
    for (const name of ["connect-60s", "grpc-60s", "grpc-web-60s"]) assert.ok(names.includes(name), name);
  });
});

describe("the call's AbortSignal aborts at the deadline on every path", () => {
  let srv: TestServer;
  /** What the store's groups.create saw, by group name: whether its signal aborted before the fallback. */
  const seen = new Map<string, boolean>();
  /** Resolves when the store's groups.create for a name has settled; waiters registered before it do too. */
  const settled = new Map<string, () => void>();
  const storeCallSettled = (name: string) =>
    seen.has(name)
      ? Promise.resolve()
      : new Promise<void>((resolve) => {
          settled.set(name, resolve);
          // Liveness bound only: past the 60 s fallback, the handler never ran.
          setTimeout(resolve, 65_000).unref();
        });
  before(async () => {
    srv = await startTestServer({
      // groups.create (in the transaction that also writes its event, or in the one statement that carries it
      // where the engine has insertWithEvents) waits for the call's signal instead of writing; 60 s is the
      // fallback a path without the abort would hit.
      decorateStore: (store) => {
        const waiting = (parts: StoreParts, signal: AbortSignal | undefined): StoreParts => {
          const groups = Object.create(parts.groups) as typeof parts.groups;
          groups.create = async (record: { name: string }) => {
            const aborted = await new Promise<boolean>((resolve) => {
              if (signal?.aborted) return resolve(true);
              const fallback = setTimeout(() => resolve(false), 60_000);
              signal?.addEventListener("abort", () => {
                clearTimeout(fallback);
                resolve(true);
              });
            });
            seen.set(record.name, aborted);
            settled.get(record.name)?.();
            throw new Error("the test store writes nothing");
          };
          // The other parts through the prototype: a set of parts keeps them as getters, not own properties.
          return Object.create(parts, { groups: { value: groups } }) as StoreParts;
        };
        return {
          ...store,
          transaction: (fn, signal) => store.transaction((tx) => fn(waiting(tx, signal)), signal),
          ...(store.insertWithEvents && {
            insertWithEvents: (write, events, signal) => store.insertWithEvents!((parts) => write(waiting(parts, signal)), events, signal),
          }),
        };
      },
    });
  });
  after(async () => {
    await srv.close();
  });

  // 2 s: long enough that authentication is over before it on a loaded machine, so the handler runs and waits.
  const DEADLINE_MS = 2_000;
  for (const [path, call] of [
    ["Connect fast path", (name: string) => connectCreate(srv, name, DEADLINE_MS)],
    ["gRPC-Web (connect-node)", (name: string) => grpcWebCreate(srv, name, `${DEADLINE_MS}m`)],
    ["native gRPC", (name: string) => grpcCreate(srv, name, Date.now() + DEADLINE_MS)],
  ] as const) {
    test(`${path}: the store's signal aborts, the client sees DEADLINE_EXCEEDED`, async () => {
      const name = `signal-${path.split(" ")[0]!.toLowerCase()}-${path.length}`;
      const code = await call(name);
      assert.ok(code === "deadline_exceeded" || code === Code.DeadlineExceeded || code === grpc.status.DEADLINE_EXCEEDED, String(code));
      // The handler ran (the deadline was far enough), and its signal aborted rather than waiting out the fallback.
      await storeCallSettled(name);
      assert.equal(seen.get(name), true, "the store call's signal aborted at the deadline");
    });
  }
});
