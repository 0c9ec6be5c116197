import assert from "node:assert/strict";
import { rest, type RestResult, type TestServer } from "./server.js";

/** The body of a 200 response; fails the test on anything else. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export async function ok(res: Promise<RestResult> | RestResult): Promise<any> {
  const r = await res;
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

/** The uid of a built-in role, read from the roles list the way a client finds it. */
export async function builtinRole(srv: TestServer, name: string): Promise<string> {
  const body = await ok(rest(srv.url, "GET", `/iam/v2beta1/roles?name=${encodeURIComponent(name)}`));
  const role = body.roles.find((r: { name: string; uid: string }) => r.name === name && !r.uid.includes("/"));
  assert.ok(role, `built-in role ${name}`);
  return role.uid;
}

/** Creates a custom role in group with these capability names; returns its uid. */
export async function customRole(srv: TestServer, group: string, name: string, capabilities: string[]): Promise<string> {
  return (await ok(rest(srv.url, "POST", `/iam/v2beta1/roles/${group}`, { name, capabilities }))).uid;
}

/** A caller who is not the administrator: its identity uid and an API token for it. */
export interface Caller {
  uid: string;
  token: string;
}

/**
 * Creates an identity in group (as the administrator), binds roleUid to it at
 * bindAt (default: group) unless roleUid is null, and mints it an API token.
 */
export async function createCaller(srv: TestServer, group: string, name: string, roleUid: string | null, bindAt = group): Promise<Caller> {
  const identity = await ok(
    rest(srv.url, "POST", `/iam/v2beta1/identities/${group}`, { name, claimMatch: { issuer: "https://ci.example", subject: name } }),
  );
  if (roleUid !== null) await ok(rest(srv.url, "POST", `/iam/v2beta1/roleBindings/${bindAt}`, { identityUid: identity.uid, roleUid }));
  return { uid: identity.uid, token: (await srv.server.tokens.mint(identity.uid)).token };
}

/** The authorization header of a caller, for rest(). */
export const as = (caller: Caller) => ({ authorization: `Bearer ${caller.token}` });
