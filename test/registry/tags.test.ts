import assert from "node:assert/strict";
import { before, describe, test } from "node:test";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { TagsService, type Tag } from "../../gen/platformapi/registry/v2beta1/tags_pb.js";
import { assertRestError, fieldViolations, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { describeOverGrpc, grpcError, grpcViolations } from "../support/grpc-suite.js";
import { describeListContract } from "../support/list-contract.js";
import { assertPagedWalks } from "../support/paged-walk.js";
import { as, builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import { assertChildOf, assertCreated, assertDeletedOnce, createStranger, iso, restOn, serveForSuite } from "../support/resource-suite.js";
import { assertViolations } from "../support/rest-errors.js";
import { createGroup } from "../support/server.js";

const PATH = "/registry/v2beta1/tags";
const START = Date.parse("2031-05-06T07:08:09.123Z");
const digest = (c: string) => `sha256:${c.repeat(64)}`;
const ALL_FORMS = "include_referrers=true&include_dates=true&include_epochs=true";

let clock = START;
let org: { uid: string };
const srv = serveForSuite({ now: () => clock }, async () => {
  org = await createGroup(srv.url, null, "tag org");
});
const call = restOn(srv);
const createRepo = async (name: string, parent = org.uid) => ok(call("POST", `/registry/v2beta1/repos/${parent}`, { name }));
const putTag = (repo: string, body: object, headers?: Record<string, string>) => ok(call("POST", `${PATH}/${repo}`, body, headers));

describe("create, get, delete", () => {
  let repo: { uid: string };
  before(async () => {
    repo = await createRepo("tagged");
  });

  test("a tag gets a child uid of its repo and an update time but no create time; Get returns the same", async () => {
    const tag = await putTag(repo.uid, {
      name: "latest",
      digest: digest("a"),
      bundles: ["base"],
      uid: "e".repeat(40),
      updateTime: "2001-01-01T00:00:00Z",
    });
    assertCreated(tag, repo.uid, {
      name: "latest",
      digest: digest("a"),
      updateTime: iso(clock),
      deprecated: false,
      bundles: ["base"],
    });
    assert.match(tag.updateTime, MILLIS_TIMESTAMP);
    assert.deepEqual(await ok(call("GET", `${PATH}/${tag.uid}`)), tag);
  });

  test("create of a name the repo has updates that tag: same uid, new digest, updateTime moves", async () => {
    const first = await putTag(repo.uid, { name: "stable", digest: digest("1"), bundles: ["base"] });
    clock += 1000;
    const second = await putTag(repo.uid, { name: "stable", digest: digest("2"), deprecated: true });
    assert.deepEqual(second, {
      uid: first.uid,
      name: "stable",
      digest: digest("2"),
      updateTime: iso(clock),
      deprecated: true,
      bundles: [],
    });
    assert.notEqual(second.updateTime, first.updateTime);
    assert.deepEqual(await ok(call("GET", `${PATH}/${first.uid}`)), second);
    const listed = await ok(call("GET", `${PATH}?uidp.children_of=${repo.uid}&name=stable`));
    assert.deepEqual(listed.tags, [second]);
    assert.equal(listed.totalCount, "1");
    // The same name in another repo is another tag.
    const other = await createRepo("tagged-too");
    assert.notEqual((await putTag(other.uid, { name: "stable", digest: digest("2") })).uid, first.uid);
  });

  const CASES: [string, object, string[]][] = [
    ["no name", { digest: digest("a") }, ["name"]],
    ["a name starting with a dot", { name: ".hidden", digest: digest("a") }, ["name"]],
    ["a name starting with a dash", { name: "-x", digest: digest("a") }, ["name"]],
    ["a name with a slash", { name: "a/b", digest: digest("a") }, ["name"]],
    ["a 129-character name", { name: "t".repeat(129), digest: digest("a") }, ["name"]],
    ["no digest", { name: "ok" }, ["digest"]],
    ["an upper-case digest", { name: "ok", digest: `sha256:${"A".repeat(64)}` }, ["digest"]],
    ["a short digest", { name: "ok", digest: `sha256:${"a".repeat(63)}` }, ["digest"]],
    ["another algorithm", { name: "ok", digest: `sha512:${"a".repeat(64)}` }, ["digest"]],
    ["a bundle outside the allow-list", { name: "ok", digest: digest("a"), bundles: ["platinum"] }, ["bundles"]],
    ["everything wrong", { name: "", digest: "latest", bundles: ["x"] }, ["name", "digest", "bundles"]],
  ];
  for (const [label, body, fields] of CASES) {
    test(`${label} is INVALID_ARGUMENT on ${fields.join(", ")}, and nothing is created`, async () => {
      const err = assertViolations(await call("POST", `${PATH}/${repo.uid}`, body), fields);
      if (fields[0] === "digest") assert.match(fieldViolations(err)[0]!.description, /sha256:.*64 lowercase hex/);
      assert.equal((await ok(call("GET", `${PATH}?uidp.children_of=${repo.uid}&name=ok`))).totalCount, "0");
    });
  }

  test("names of 1 and 128 characters, with dots, dashes and underscores, are accepted", async () => {
    for (const name of ["1", "_x", "v1.2.3-rc_1", "A".repeat(128)])
      assert.equal((await putTag(repo.uid, { name, digest: digest("b") })).name, name);
  });

  test("the parent must be an existing repo: malformed → INVALID_ARGUMENT on parent, a group or missing repo → NOT_FOUND", async () => {
    assertViolations(await call("POST", `${PATH}/nope`, { name: "x", digest: digest("a") }), ["parent"]);
    assertRestError(await call("POST", `${PATH}/${org.uid}`, { name: "x", digest: digest("a") }), 404, 5, "NOT_FOUND");
    assertRestError(await call("POST", `${PATH}/${org.uid}/0123456789abcdef`, { name: "x", digest: digest("a") }), 404, 5, "NOT_FOUND");
  });

  test("Get of a missing tag is NOT_FOUND; a malformed uid INVALID_ARGUMENT on uid", async () => {
    assertRestError(await call("GET", `${PATH}/${repo.uid}/0123456789abcdef`), 404, 5, "NOT_FOUND");
    assertRestError(await call("GET", `${PATH}/${repo.uid}`), 404, 5, "NOT_FOUND");
    assertViolations(await call("GET", `${PATH}/x`), ["uid"]);
  });

  test("delete returns {}; a second delete is NOT_FOUND", async () => {
    const tag = await putTag(repo.uid, { name: "doomed", digest: digest("d") });
    await assertDeletedOnce(srv, `${PATH}/${tag.uid}`);
  });
});

/** The list's tags by repo and name ("a:latest"), as seeded. */
const byName = new Map<string, { uid: string; name: string; updateTime: string }>();
/** The tags the List shows by default: no referrer, dated or epoch forms. */
const PLAIN = ["a:1.25", "a:latest", "b:1.25-r3-dev", "b:2024-01-31", "b:latest", "b:v20240131"];

// Repo a is in the team, repo b in a group below it; every form of tag name is there, some twice.
describeListContract(
  {
    resource: "tags",
    srv,
    path: PATH,
    seed: async () => {
      const team = await createGroup(srv.url, org.uid, "tag list team");
      const sub = await createGroup(srv.url, team.uid, "tag list sub");
      const repos = { a: await createRepo("list-a", team.uid), b: await createRepo("list-b", sub.uid) };
      const plan: ["a" | "b", string, string, number][] = [
        ["a", "latest", "1", 0],
        ["a", "1.25", "1", 1],
        ["a", "sha256-abc.sig", "2", 0],
        ["a", "1.25-20240131", "2", 0],
        ["a", "1.25-r3", "1", 2],
        ["b", "latest", "2", 0],
        ["b", "1.25-20240131-r1", "3", 1],
        ["b", "2024-01-31", "3", 0],
        ["b", "v20240131", "1", 3],
        ["b", "1.25-r3-dev", "1", 0],
      ];
      const items = [];
      for (const [repo, name, d, step] of plan) {
        clock += step;
        const tag = await putTag(repos[repo].uid, { name, digest: digest(d) });
        items.push(tag);
        byName.set(`${repo}:${name}`, tag);
      }
      clock += 10;
      // Putting a tag again moves its update time.
      const moved = await putTag(repos.a.uid, { name: "1.25", digest: digest("3") });
      items[1] = moved;
      byName.set("a:1.25", moved);
      return { root: team.uid, team: sub.uid, items };
    },
    orderFields: ["uid", "name", "updated_at"],
    unsortable: ["created_at"],
    always: ALL_FORMS,
    filters: () => [
      [`digest=${digest("1")}`, (t) => ["a:1.25-r3", "a:latest", "b:1.25-r3-dev", "b:v20240131"].some((n) => byName.get(n)!.uid === t.uid)],
      [`digest=${digest("3")}&name=1.25`, (t) => t.uid === byName.get("a:1.25")!.uid],
    ],
    invalid: [
      ["digest=latest", ["digest"]],
      ["updated_since=yesterday", ["updated_since"]],
    ],
    lister: "viewer",
  },
  (listed) => {
    /** The tags a filter lists without include flags unless it names them, as "repo:name", sorted. */
    const names = async (query: string) =>
      ((await listed.list(`${listed.scope}&${query}`)).tags as { uid: string }[])
        .map((t) => [...byName].find(([, v]) => v.uid === t.uid)![0])
        .sort();

    test("referrer, dated and epoch tags are left out by default; each include flag brings its form back", async () => {
      assert.deepEqual(await names(""), PLAIN);
      assert.deepEqual(await names("include_referrers=true"), [...PLAIN, "a:sha256-abc.sig"].sort());
      assert.deepEqual(await names("include_dates=true"), [...PLAIN, "a:1.25-20240131"].sort());
      assert.deepEqual(await names("include_epochs=true"), [...PLAIN, "a:1.25-r3", "b:1.25-20240131-r1"].sort());
      assert.deepEqual(await names(`${ALL_FORMS}`), [...byName.keys()].sort());
      assert.deepEqual(await names("include_referrers=false&include_dates=false&include_epochs=false"), PLAIN);
    });

    test("name and digest filter the default forms too; descendants_of takes a repo", async () => {
      assert.deepEqual(await names("name=latest"), ["a:latest", "b:latest"]);
      assert.deepEqual(await names(`digest=${digest("1")}`), ["a:latest", "b:1.25-r3-dev", "b:v20240131"]);
      const repoA = byName.get("a:latest")!.uid.replace(/\/[^/]+$/, "");
      assert.equal((await listed.list(`uidp.descendants_of=${repoA}&${ALL_FORMS}`)).totalCount, "5");
    });

    test("updated_since returns only tags updated strictly after it", async () => {
      const latest = listed.items[1];
      assert.deepEqual(await names(`updated_since=${encodeURIComponent(iso(START))}`), PLAIN, "every tag was put after START");
      assert.deepEqual(await names(`updated_since=${encodeURIComponent(iso(Date.parse(latest.updateTime) - 1))}`), ["a:1.25"]);
      assert.deepEqual(await names(`updated_since=${encodeURIComponent(latest.updateTime)}`), []);
      const v2024 = byName.get("b:v20240131")!;
      assert.deepEqual(await names(`updated_since=${encodeURIComponent(iso(Date.parse(v2024.updateTime) - 1))}`), [
        "a:1.25",
        "b:1.25-r3-dev",
        "b:v20240131",
      ]);
    });

    test("the default forms page in every order too", async () => {
      const plain = listed.items.filter((t) => PLAIN.some((p) => byName.get(p)!.uid === t.uid));
      await assertPagedWalks(srv.url, PATH, "tags", listed.scope, plain, ["name", "updated_at"]);
    });
  },
);

describe("capabilities", () => {
  let repo: { uid: string };
  let tag: { uid: string };
  let viewer: Caller;
  let editor: Caller;
  let owner: Caller;
  let stranger: Caller;
  before(async () => {
    const group = await createGroup(srv.url, org.uid, "tag caps");
    repo = await createRepo("caps", group.uid);
    tag = await putTag(repo.uid, { name: "latest", digest: digest("a") });
    viewer = await createCaller(srv, group.uid, "tag viewer", await builtinRole(srv, "viewer"));
    editor = await createCaller(srv, group.uid, "tag editor", await builtinRole(srv, "editor"));
    owner = await createCaller(srv, group.uid, "tag owner", await builtinRole(srv, "owner"));
    stranger = await createStranger(srv, "tag caps");
  });

  test("a viewer lists and gets tags but cannot create or delete them (7)", async () => {
    assert.deepEqual((await ok(call("GET", `${PATH}?uidp.children_of=${repo.uid}`, undefined, as(viewer)))).tags, [tag]);
    assert.deepEqual(await ok(call("GET", `${PATH}/${tag.uid}`, undefined, as(viewer))), tag);
    assertRestError(
      await call("POST", `${PATH}/${repo.uid}`, { name: "viewer", digest: digest("b") }, as(viewer)),
      403,
      7,
      "PERMISSION_DENIED",
    );
    assertRestError(await call("DELETE", `${PATH}/${tag.uid}`, undefined, as(viewer)), 403, 7, "PERMISSION_DENIED");
  });

  test("an editor cannot create, update or delete tags (7), and nothing changes", async () => {
    assertRestError(
      await call("POST", `${PATH}/${repo.uid}`, { name: "editor", digest: digest("b") }, as(editor)),
      403,
      7,
      "PERMISSION_DENIED",
    );
    assertRestError(
      await call("POST", `${PATH}/${repo.uid}`, { name: "latest", digest: digest("b") }, as(editor)),
      403,
      7,
      "PERMISSION_DENIED",
    );
    assertRestError(await call("DELETE", `${PATH}/${tag.uid}`, undefined, as(editor)), 403, 7, "PERMISSION_DENIED");
    assert.deepEqual((await ok(call("GET", `${PATH}?uidp.children_of=${repo.uid}`))).tags, [tag]);
  });

  test("an owner creates, updates and deletes tags", async () => {
    const made = await putTag(repo.uid, { name: "owner-made", digest: digest("b") }, as(owner));
    assert.equal((await putTag(repo.uid, { name: "owner-made", digest: digest("c") }, as(owner))).uid, made.uid);
    assert.deepEqual(await ok(call("DELETE", `${PATH}/${made.uid}`, undefined, as(owner))), {});
  });

  test("a caller of another organization sees none of the tags and reaches none (7)", async () => {
    assert.equal((await ok(call("GET", `${PATH}?uidp.descendants_of=${repo.uid}`, undefined, as(stranger)))).totalCount, "0");
    assertRestError(await call("GET", `${PATH}/${tag.uid}`, undefined, as(stranger)), 403, 7, "PERMISSION_DENIED");
    assertRestError(
      await call("POST", `${PATH}/${repo.uid}`, { name: "latest", digest: digest("f") }, as(stranger)),
      403,
      7,
      "PERMISSION_DENIED",
    );
    assert.deepEqual(await ok(call("GET", `${PATH}/${tag.uid}`)), tag);
  });
});

describeOverGrpc(
  srv,
  TagsService,
  "create, create again, get, list with updated_since, delete; errors carry their details",
  async (client, org) => {
    const repo = await createRepo("grpc-tags", org);
    const first: Tag = await client.call("createTag", { parent: repo.uid, tag: { name: "latest", digest: digest("1") } });
    assertChildOf(first.uid, repo.uid);
    assert.equal(timestampMs(first.updateTime!), clock);
    const mark = clock;
    clock += 7;
    const again: Tag = await client.call("createTag", {
      parent: repo.uid,
      tag: { name: "latest", digest: digest("2"), bundles: ["fips"] },
    });
    assert.equal(again.uid, first.uid);
    assert.equal(again.digest, digest("2"));
    assert.equal(timestampMs(again.updateTime!), clock);
    assert.deepEqual((await client.call("getTag", { uid: first.uid })).bundles, ["fips"]);
    const since = await client.call("listTags", { uidp: { childrenOf: repo.uid }, updatedSince: timestampFromMs(mark) });
    assert.deepEqual(
      since.tags.map((t: Tag) => t.uid),
      [first.uid],
    );
    assert.equal(since.totalCount, 1n);
    assert.equal((await client.call("listTags", { uidp: { childrenOf: repo.uid }, updatedSince: timestampFromMs(clock) })).totalCount, 0n);

    const invalid = await grpcError(client.call("createTag", { parent: repo.uid, tag: { name: "-bad", digest: "sha256:nope" } }));
    assert.equal(invalid.code, 3);
    assert.deepEqual(grpcViolations(invalid), ["name", "digest"]);

    await client.call("deleteTag", { uid: first.uid });
    assert.equal((await grpcError(client.call("getTag", { uid: first.uid }))).code, 5);
  },
);
