/**
 * What the fuzzer works against: one resource of every kind the server
 * creates over REST, made as the administrator, and a body every operation
 * with a request body accepts (the starting point of shape-aware mutations).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { JsonObject } from "@bufbuild/protobuf";
import type { RestOperation } from "../../src/server/rest/transcoder.js";
import { platformCli } from "./platform-cli.js";
import { builtinRole, ok } from "./principals.js";
import { rest, type TestServer } from "./server.js";

/** Issuer URLs of fixture identities and IdPs: loopback port 1, so any fetch fails at once. */
export const LOOPBACK_ISSUER = "http://127.0.0.1:1";

/** Uids the create bodies refer to. */
interface Refs {
  org: string;
  identity: string;
  role: string;
  viewer: string;
}

/** A create body per collection; i makes names unique. */
const CREATE_BODIES: Record<string, (r: Refs, i: number) => JsonObject> = {
  groups: (_r, i) => ({ name: `fuzz group ${i}`, description: "made by the fuzz fixture" }),
  identities: (_r, i) => ({ name: `fuzz identity ${i}`, claimMatch: { issuer: LOOPBACK_ISSUER, subject: `fuzz-${i}` } }),
  roles: (_r, i) => ({ name: `fuzz role ${i}`, capabilities: ["CAP_REPO_LIST"] }),
  roleBindings: (r) => ({ identityUid: r.identity, roleUid: r.role }),
  identityProviders: (r, i) => ({
    name: `fuzz idp ${i}`,
    defaultRole: r.viewer,
    oidc: { issuer: LOOPBACK_ISSUER, clientId: "fuzz", clientSecret: "fuzz-secret" },
  }),
  accountAssociations: () => ({ name: "fuzz clouds", amazon: { account: "123456789012" } }),
  groupInvites: (r) => ({ roleUid: r.viewer, ttl: "86400s" }),
  repos: (_r, i) => ({ name: `fuzz-repo-${i}` }),
  tags: (_r, i) => ({ name: `t${i}`, digest: `sha256:${"c".repeat(64)}` }),
  subscriptions: (_r, i) => ({ sink: `https://hooks.example.com/fuzz/${i}`, types: ["api.platform.iam."] }),
};

/** The collection an operation works on: "groups" in /iam/v2beta1/groups/{uid=**}. */
export function collectionOf(op: RestOperation): string {
  return /^\/[^/]+\/[^/]+\/([A-Za-z]+)/.exec(op.path)?.[1] ?? op.path;
}

/** True for the operations that create one resource of their collection. */
const isCreate = (op: RestOperation) => op.method === "POST" && /\.Create\w+$/.test(op.rpc) && op.variables.length > 0;

/** The fixture the fuzzer starts from. */
export interface FuzzFixture {
  org: string;
  folder: string;
  /** The built-in viewer role. */
  viewer: string;
  /** A resource uid per collection ("groups", "identities", …). */
  uids: Map<string, string>;
  /** The uid a Create of each collection is made below. */
  parents: Map<string, string>;
  /** A body each operation with a request body accepts, by rpc. */
  bodies: Map<string, JsonObject>;
  /** Every uid in the fixture and the built-in viewer role: strings fuzzed fields should try. */
  allUids: string[];
}

/** Creates the fixture over REST as the administrator; throws when a served Create has no body here. */
export async function createFuzzFixture(srv: TestServer): Promise<FuzzFixture> {
  const post = (path: string, body: JsonObject) => ok(rest(srv.url, "POST", path, body));
  const org = (await post("/iam/v2beta1/groups", { name: "fuzz org" })).uid as string;
  const folder = (await post(`/iam/v2beta1/groups/${org}`, { name: "fuzz folder" })).uid as string;
  const viewer = await builtinRole(srv, "viewer");
  const refs: Refs = { org, viewer, identity: "", role: "" };
  const uids = new Map<string, string>([["groups", folder]]);
  const parents = new Map<string, string>();
  const creates = srv.server.restOperations.filter(isCreate);
  // Identities and roles first: bindings refer to them; repos before tags, which live in a repo.
  const order = ["groups", "identities", "roles", "repos"];
  const rank = (op: RestOperation) => order.indexOf(collectionOf(op)) + 1 || order.length + 1;
  for (const op of [...creates].sort((a, b) => rank(a) - rank(b))) {
    const collection = collectionOf(op);
    const body = CREATE_BODIES[collection];
    if (!body) throw new Error(`the fuzz fixture has no create body for ${op.rpc}: add one to CREATE_BODIES`);
    const parent = collection === "tags" ? uids.get("repos")! : org;
    parents.set(collection, parent);
    if (collection === "groups") continue;
    const created = await post(op.path.replace(/\{[^}]+\}/, parent), body(refs, 0));
    uids.set(collection, created.uid as string);
    if (collection === "identities") refs.identity = created.uid as string;
    if (collection === "roles") refs.role = created.uid as string;
  }
  // The folder is kept non-empty, so a fuzzed DELETE cannot remove it.
  await post(`/iam/v2beta1/identities/${folder}`, CREATE_BODIES.identities!(refs, 1));
  if (srv.server.restOperations.some((op) => collectionOf(op) === "advisories")) {
    uids.set("advisories", (await importAdvisories(srv, org, 1))[0]!);
  }
  const bodies = new Map<string, JsonObject>();
  for (const op of srv.server.restOperations) {
    if (op.body === "") continue;
    const make = CREATE_BODIES[collectionOf(op)];
    if (make) bodies.set(op.rpc, make(refs, 2));
  }
  bodies.set("platformapi.iam.v2beta1.RoleBindingsService.BatchCreateRoleBindings", {
    parent: org,
    roleUid: refs.role,
    requests: [{ parent: org, roleBinding: { identityUid: refs.identity } }],
  });
  bodies.set("platformapi.auth.v1.AuthService.Register", { code: "not-a-real-invite-code" });
  const allUids = [org, folder, viewer, ...uids.values()];
  return { org, folder, viewer, uids, parents, bodies, allUids: [...new Set(allUids)] };
}

/**
 * Imports n advisories into group with the real `platform-api import-advisories`
 * (one generated OSV record with n affected packages); returns their uids.
 */
export async function importAdvisories(srv: TestServer, group: string, n: number): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), "fuzz-osv-"));
  try {
    const affected = Array.from({ length: n }, (_, i) => ({
      package: { ecosystem: "npm", name: `fuzz-package-${i}` },
      ranges: [{ type: "SEMVER", events: [{ introduced: "0" }, { fixed: "1.0.0" }] }],
    }));
    const record = { id: `FUZZ-${n}`, modified: "2024-01-01T00:00:00Z", published: "2024-01-01T00:00:00Z", aliases: [], affected };
    writeFileSync(join(dir, "fuzz.json"), JSON.stringify(record));
    const run = await platformCli(srv.dataDir, ["import-advisories", "--group", group, dir]);
    if (run.code !== 0) throw new Error(`import-advisories failed: ${run.stdout}${run.stderr}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const body = await ok(rest(srv.url, "GET", `/vulnerabilities/v2beta1/advisories?uidp.children_of=${group}&page_size=200`));
  return (body.advisories as { uid: string }[]).map((a) => a.uid);
}

/**
 * Fills every listable collection below a fresh org with n items each (made
 * over REST, a few at a time); returns the org uid.
 */
export async function fillCollections(srv: TestServer, fixture: FuzzFixture, n: number): Promise<string> {
  const post = (path: string, body: JsonObject) => ok(rest(srv.url, "POST", path, body));
  const org = (await post("/iam/v2beta1/groups", { name: "crowded org" })).uid as string;
  const refs: Refs = { org, viewer: fixture.viewer, identity: "", role: "" };
  refs.role = (await post(`/iam/v2beta1/roles/${org}`, CREATE_BODIES.roles!(refs, -1))).uid as string;
  const repo = (await post(`/registry/v2beta1/repos/${org}`, CREATE_BODIES.repos!(refs, -1))).uid as string;
  const inParallel = async <T>(count: number, make: (i: number) => Promise<T>): Promise<T[]> => {
    const out: T[] = [];
    for (let i = 0; i < count; i += 16)
      out.push(...(await Promise.all(Array.from({ length: Math.min(16, count - i) }, (_, j) => make(i + j)))));
    return out;
  };
  const groups = await inParallel(n, async (i) => (await post(`/iam/v2beta1/groups/${org}`, CREATE_BODIES.groups!(refs, i))).uid as string);
  const identities = await inParallel(
    n,
    async (i) => (await post(`/iam/v2beta1/identities/${org}`, CREATE_BODIES.identities!(refs, i))).uid as string,
  );
  await inParallel(n, (i) => post(`/iam/v2beta1/roles/${org}`, CREATE_BODIES.roles!(refs, i)));
  await inParallel(n, (i) =>
    post(`/iam/v2beta1/roleBindings/${org}`, CREATE_BODIES.roleBindings!({ ...refs, identity: identities[i]! }, i)),
  );
  await inParallel(n, (i) => post(`/iam/v2beta1/identityProviders/${org}`, CREATE_BODIES.identityProviders!(refs, i)));
  await inParallel(n, (i) => post(`/iam/v2beta1/accountAssociations/${groups[i]!}`, CREATE_BODIES.accountAssociations!(refs, i)));
  await inParallel(n, (i) => post(`/iam/v2beta1/groupInvites/${org}`, CREATE_BODIES.groupInvites!(refs, i)));
  await inParallel(n, (i) => post(`/registry/v2beta1/repos/${org}`, CREATE_BODIES.repos!(refs, i)));
  await inParallel(n, (i) => post(`/registry/v2beta1/tags/${repo}`, CREATE_BODIES.tags!(refs, i)));
  await importAdvisories(srv, org, n);
  return org;
}
