import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import type { ServiceError } from "@grpc/grpc-js";
import { CatalogTier, RegistryService, type Repo } from "../../gen/platformapi/registry/v1/registry_pb.js";
import { assertRestError, fieldViolations } from "../support/assertions.js";
import { grpcClient } from "../support/grpc.js";
import { as, builtinRole, createCaller, ok } from "../support/principals.js";
import { createGroup, rest, startTestServer, type TestServer } from "../support/server.js";

const PATH = "/registry/v1/repos";
const START = Date.parse("2031-05-06T07:08:09.123Z");

/** Every v2beta1 tier and its v1 name (v1's names and numbers differ from v2beta1's). */
const TIERS: [string, string][] = [
  ["CATALOG_TIER_UNSPECIFIED", "UNKNOWN"],
  ["CATALOG_TIER_APPLICATION", "APPLICATION"],
  ["CATALOG_TIER_BASE", "BASE"],
  ["CATALOG_TIER_FIPS", "FIPS"],
  ["CATALOG_TIER_AI", "AI"],
  ["CATALOG_TIER_DEVTOOLS", "DEVTOOLS"],
  ["CATALOG_TIER_COMMERCIAL", "COMMERCIAL"],
];

let clock = START;
let srv: TestServer;
let org: { uid: string };
let team: { uid: string };
let other: { uid: string };
/** The v2beta1 repos created, in TIERS order (all in team except the last two). */
const repos: Record<string, string>[] = [];

before(async () => {
  srv = await startTestServer({ now: () => clock });
  org = await createGroup(srv.url, null, "v1 registry org");
  team = await createGroup(srv.url, org.uid, "v1 registry team");
  other = await createGroup(srv.url, null, "v1 registry other");
  for (const [i, [tier]] of TIERS.entries()) {
    clock += 1000;
    const parent = i < 5 ? team.uid : i === 5 ? org.uid : other.uid;
    repos.push(
      await ok(
        rest(srv.url, "POST", `/registry/v2beta1/repos/${parent}`, {
          name: `repo-${i}`,
          description: `tier ${tier}`,
          catalogTier: tier,
          bundles: ["base"],
          aliases: [`repo-${i}:latest`],
          activeTags: ["latest"],
        }),
      ),
    );
  }
});
after(async () => {
  await srv.close();
});

const items = async (query: string, headers?: Record<string, string>) => {
  const body = await ok(rest(srv.url, "GET", `${PATH}${query}`, undefined, headers));
  assert.deepEqual(Object.keys(body), ["items"], "v1 lists are { items } with no paging fields");
  return body.items as Record<string, unknown>[];
};

describe("GET /registry/v1/repos", () => {
  test("returns every repo in the v1 shape: id, create time only, v1 tier names", async () => {
    const got = await items(`?uidp.descendants_of=${org.uid}`);
    assert.deepEqual(
      got,
      repos
        .slice(0, 6)
        .map((r, i) => ({
          id: r.uid,
          name: `repo-${i}`,
          catalogTier: TIERS[i]![1],
          bundles: ["base"],
          aliases: [`repo-${i}:latest`],
          createTime: r.createTime,
          activeTags: ["latest"],
          description: `tier ${TIERS[i]![0]}`,
        }))
        .sort((a, b) => (a.id! < b.id! ? -1 : 1)),
    );
  });

  test("every v2beta1 tier maps to its v1 name", async () => {
    const got = await items("");
    for (const [i, [, v1]] of TIERS.entries()) {
      assert.equal(got.find((r) => r.id === repos[i]!.uid)?.catalogTier, v1, `tier ${TIERS[i]![0]}`);
    }
  });

  test("filters uidp, name and id combine; a malformed id is INVALID_ARGUMENT on id", async () => {
    const ids = async (query: string) => (await items(query)).map((r) => r.id).sort();
    assert.deepEqual(await ids(`?uidp.children_of=${org.uid}`), [repos[5]!.uid]);
    assert.deepEqual(await ids(`?uidp.descendants_of=${org.uid}&name=repo-2`), [repos[2]!.uid]);
    assert.deepEqual(await ids("?name=repo-6"), [repos[6]!.uid]);
    assert.deepEqual(await ids("?name=repo"), []);
    assert.deepEqual(await ids(`?id=${repos[3]!.uid}`), [repos[3]!.uid]);
    assert.deepEqual(await ids(`?id=${repos[3]!.uid}&uidp.descendants_of=${other.uid}`), []);
    const res = await rest(srv.url, "GET", `${PATH}?id=nope`);
    const err = assertRestError(res, 400, 3, "INVALID_ARGUMENT");
    assert.deepEqual(
      fieldViolations(err).map((v) => v.field),
      ["id"],
    );
  });

  test("a caller sees the repos where it holds repo.list, nothing elsewhere", async () => {
    const viewer = await createCaller(srv, team.uid, "v1 viewer", await builtinRole(srv, "viewer"));
    assert.deepEqual(
      (await items("", as(viewer))).map((r) => r.id).sort(),
      repos
        .slice(0, 5)
        .map((r) => r.uid)
        .sort(),
    );
    assert.deepEqual(await items(`?id=${repos[6]!.uid}`, as(viewer)), []);
    const nobody = await createCaller(srv, org.uid, "v1 nobody", null);
    assert.deepEqual(await items("", as(nobody)), []);
  });

  test("over native gRPC the tiers are v1 enum numbers", async () => {
    const client = grpcClient(RegistryService, srv.port);
    try {
      const res = await client.call("listRepos", { uidp: { descendantsOf: team.uid }, name: "repo-3" });
      assert.equal(res.items.length, 1);
      const repo: Repo = res.items[0];
      assert.equal(repo.id, repos[3]!.uid);
      assert.equal(repo.catalogTier, CatalogTier.FIPS);
      assert.equal(repo.catalogTier, 6);
      assert.equal(timestampMs(repo.createTime!), Date.parse(repos[3]!.createTime!));
      const bad = await client.call("listRepos", { id: "x" }).then(
        () => assert.fail("expected INVALID_ARGUMENT"),
        (e: ServiceError) => e,
      );
      assert.equal(bad.code, 3);
    } finally {
      client.close();
    }
  });
});
