import assert from "node:assert/strict";
import { after, before } from "node:test";
import { assertRestError } from "./assertions.js";
import { as, builtinRole, createCaller, type Caller } from "./principals.js";
import { createGroup, rest, startTestServer, type RestResult, type TestServer } from "./server.js";

type ServerOptions = Parameters<typeof startTestServer>[0];

/**
 * One test server for the suite that calls this (a file, or a describe
 * block): started before its first test, closed after its last. The object
 * is filled in once the server is up, so the suite holds it from the start.
 * A file's own before hooks run concurrently with this one (node:test starts
 * a file's top-level hooks together), so what must come first goes in opts
 * (a function then, e.g. one starting the issuer the server trusts) and what
 * needs the server in ready.
 */
export function serveForSuite(
  opts: ServerOptions | (() => Promise<ServerOptions>) = {},
  ready?: (srv: TestServer) => Promise<void>,
): TestServer {
  const srv = {} as TestServer;
  before(async () => {
    Object.assign(srv, await startTestServer(typeof opts === "function" ? await opts() : opts));
    await ready?.(srv);
  });
  after(async () => {
    await srv.close();
  });
  return srv;
}

/** A group the suite's tests share, made before its first test (a root organization unless parent names one). */
export function groupForSuite(srv: TestServer, name: string, parent: () => string | null = () => null): { uid: string } {
  const group = { uid: "" };
  before(async () => {
    group.uid = (await createGroup(srv.url, parent(), name)).uid;
  });
  return group;
}

/** rest() on a suite's server. */
export const restOn =
  (srv: TestServer) =>
  (method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<RestResult> =>
    rest(srv.url, method, path, body, headers);

/** A clock value as the JSON shows timestamps. */
export const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Deletes path, which must answer {} once; then Get, and a second Delete
 * unless the resource's Delete is idempotent, are NOT_FOUND.
 */
export async function assertDeletedOnce(srv: TestServer, path: string, idempotent = false): Promise<void> {
  const deleted = await rest(srv.url, "DELETE", path);
  assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
  assert.deepEqual(deleted.body, {});
  assertRestError(await rest(srv.url, "GET", path), 404, 5, "NOT_FOUND");
  const again = await rest(srv.url, "DELETE", path);
  if (idempotent) assert.deepEqual([again.status, again.body], [200, {}]);
  else assertRestError(again, 404, 5, "NOT_FOUND");
}

/** Asserts uid is a child of parent: the parent's uid, "/" and 16 hex. */
export function assertChildOf(uid: string, parent: string, message?: string): void {
  assert.match(uid, new RegExp(`^${parent}/[0-9a-f]{16}$`), message);
}

/** Asserts a Create's response: a new child of parent, with exactly these other fields. */
export function assertCreated(got: { uid: string }, parent: string, fields: object): void {
  assertChildOf(got.uid, parent);
  assert.deepEqual(got, { uid: got.uid, ...fields });
}

/** An owner of a fresh organization: a caller of another tenant. */
export async function createStranger(srv: TestServer, label: string): Promise<Caller> {
  const org = await createGroup(srv.url, null, `${label} stranger org`);
  return createCaller(srv, org.uid, `${label} stranger`, await builtinRole(srv, "owner"));
}

/**
 * Asserts a caller gets PERMISSION_DENIED on path and the very same answer
 * on missing, a path to nothing: a denial tells nothing of what exists.
 */
export async function assertSameDenial(srv: TestServer, caller: Caller, path: string, missing: string): Promise<void> {
  const denied = assertRestError(await rest(srv.url, "GET", path, undefined, as(caller)), 403, 7, "PERMISSION_DENIED");
  assert.deepEqual(assertRestError(await rest(srv.url, "GET", missing, undefined, as(caller)), 403, 7, "PERMISSION_DENIED"), denied);
}
