/**
 * AdvisoriesService end to end: advisories imported with the real CLI (plus
 * one written through a second connection, with events of other kinds), then
 * read over REST and gRPC: Get, every List filter, paged walks in every
 * order, capability enforcement, and the absence of any write.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { ServiceError } from "@grpc/grpc-js";
import {
  AdvisoriesService,
  AdvisoryEvent_FalsePositiveDetermination_Type,
  EventTypeFilter,
  ReviewState,
} from "../../gen/platformapi/vulnerabilities/v2beta1/advisories_pb.js";
import { advisoryMessage, advisoryRecord } from "../../src/services/vulnerabilities/advisory-messages.js";
import type { AdvisoryEventRecord, AdvisoryRecord } from "../../src/store/store.js";
import { assertRestError, MILLIS_TIMESTAMP } from "../support/assertions.js";
import { grpcClient, type GrpcTestClient } from "../support/grpc.js";
import { describeListContract } from "../support/list-contract.js";
import { assertPagedWalks } from "../support/paged-walk.js";
import { importCounts, platformCli } from "../support/platform-cli.js";
import { as, builtinRole, createCaller, ok, type Caller } from "../support/principals.js";
import { assertChildOf, assertSameDenial, serveForSuite } from "../support/resource-suite.js";
import { createGroup, rest } from "../support/server.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const PATH = "/vulnerabilities/v2beta1/advisories";
const DATA = fileURLToPath(new URL("../data/osv", import.meta.url));

let orgA: string;
let orgB: string;
let hand: AdvisoryRecord;
/** Every advisory of org A as the administrator lists it. */
let all: Json[];
let grpc: GrpcTestClient;
let tmp: string;

/** An advisory with events of kinds the import never writes, in A. */
function handMade(group: string): AdvisoryRecord {
  const uid = `${group}/${"0".repeat(15)}1`;
  const e = (n: number) => `${uid}/${n.toString().padStart(16, "0")}`;
  return {
    uid,
    parentUid: group,
    advisoryId: "CGA-xvgw-cvr7-9g2q",
    legacyAdvisoryId: "CGA-LEGACY-1",
    author: "alice@example.com",
    artifactName: "openssl",
    artifactType: "apk",
    artifactArchitecture: "x86_64",
    componentName: "libssl3",
    componentLocation: "./PKGINFO",
    componentType: "apk",
    origin: "openssl",
    aliases: ["CVE-2024-22859"],
    severities: [{ type: 1, score: "AV:N/AC:L/Au:N/C:P/I:N/A:N" }],
    events: [
      {
        uid: e(1),
        createTime: 1_700_000_001_000,
        author: "scanner-bot",
        reviewer: "rita",
        reviewState: 2,
        issue: null,
        type: "detection",
        data: { scanv1: { scanner: "grype", componentVersion: "3.0.0" } },
      },
      {
        uid: e(2),
        createTime: 1_700_000_002_000,
        author: "alice",
        reviewer: "rita",
        reviewState: 2,
        issue: "https://issues.example/42",
        type: "falsePositiveDetermination",
        data: { type: "TYPE_COMPONENT_VULNERABILITY_MISMATCH", note: "not our build" },
      },
      // Later but pending: the latest approved event stays the false positive.
      {
        uid: e(3),
        createTime: 1_700_000_003_000,
        author: "mallory",
        reviewer: "",
        reviewState: 1,
        issue: null,
        type: "fixNotPlanned",
        data: { note: "maybe" },
      },
    ],
    createTime: 1_700_000_000_000,
    updateTime: 1_700_000_500_000,
    deleteTime: null,
  };
}

async function importInto(group: string, ...paths: string[]) {
  const run = await platformCli(srv, ["import-advisories", "--group", group, ...paths]);
  assert.equal(run.code, 0, run.stderr);
  return importCounts(run);
}

const srv = serveForSuite({}, async () => {
  orgA = (await createGroup(srv.url, null, "org a")).uid;
  orgB = (await createGroup(srv.url, null, "org b")).uid;
  // A copy of a real record with its fix removed: the one advisory whose latest event is its detection.
  tmp = mkdtempSync(join(tmpdir(), "osv-unfixed-"));
  const unfixed = JSON.parse(readFileSync(join(DATA, "go", "GO-2023-1737.json"), "utf8"));
  unfixed.id = "GO-TEST-UNFIXED";
  unfixed.affected[0].ranges[0].events = [{ introduced: "0" }];
  writeFileSync(join(tmp, "unfixed.json"), JSON.stringify(unfixed));
  assert.deepEqual(await importInto(orgA, DATA, tmp), { created: 13, updated: 0, unchanged: 0, skipped: 0 });
  assert.deepEqual(await importInto(orgB, join(DATA, "ghsa")), { created: 2, updated: 0, unchanged: 0, skipped: 0 });
  const second = await srv.openStore();
  hand = handMade(orgA);
  assert.deepEqual(await second.advisories.upsert([hand]), ["created"]);
  await second.close();
  all = (await ok(rest(srv.url, "GET", `${PATH}?uidp.descendants_of=${orgA}&page_size=200`))).advisories;
  grpc = grpcClient(AdvisoriesService, srv.port);
});
after(() => {
  grpc.close();
  rmSync(tmp, { recursive: true, force: true });
});

const byId = (id: string) => all.filter((a) => a.advisoryId === id);
const uids = (items: Json[]) => items.map((a) => a.uid).sort();

describe("GetAdvisory", () => {
  test("returns the imported advisory over REST: fields, severities and events", async () => {
    assert.equal(all.length, 14);
    const [crypto] = byId("GHSA-3ww4-gg4f-jr7f");
    const got = await ok(rest(srv.url, "GET", `${PATH}/${crypto.uid}`));
    assert.deepEqual(got, crypto, "Get and List agree");
    const { events, ...fields } = got;
    assert.deepEqual(fields, {
      uid: crypto.uid,
      advisoryId: "GHSA-3ww4-gg4f-jr7f",
      createTime: "2024-02-05T21:30:31.000Z",
      updateTime: "2024-07-29T14:44:04.000Z",
      author: "osv-import",
      artifactName: "cryptography",
      artifactType: "library",
      artifactArchitecture: "",
      componentName: "cryptography",
      componentLocation: "",
      componentType: "pypi",
      aliases: ["CVE-2023-50782"],
      severities: [
        { type: "TYPE_CVSS_V3", score: "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N" },
        { type: "TYPE_CVSS_V4", score: "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:N/VA:N/SC:N/SI:N/SA:N" },
      ],
    });
    assert.equal(events.length, 2);
    for (const e of events) {
      assertChildOf(e.uid, crypto.uid, "event uids are children of the advisory");
      assert.equal(e.author, "osv-import");
      assert.equal(e.reviewState, "REVIEW_STATE_APPROVED");
      assert.match(e.createTime, MILLIS_TIMESTAMP);
    }
    assert.deepEqual(events[0].detection, { manual: {} });
    assert.equal(events[0].createTime, "2024-02-05T21:30:31.000Z");
    assert.equal(events[1].fixed.fixedVersion, "42.0.0");
    assert.equal(events[1].createTime, "2024-07-29T14:44:04.000Z");
  });

  test("rebuilds each event's kind over gRPC, with the other fields of a hand-written advisory", async () => {
    const got = await grpc.call("getAdvisory", { uid: hand.uid });
    assert.equal(got.advisoryId, "CGA-xvgw-cvr7-9g2q");
    assert.equal(got.legacyAdvisoryId, "CGA-LEGACY-1");
    assert.equal(got.deleteTime, undefined);
    assert.deepEqual(
      got.severities.map((s: Json) => [s.type, s.score]),
      [[1, "AV:N/AC:L/Au:N/C:P/I:N/A:N"]],
    );
    const [detection, falsePositive, notPlanned] = got.events;
    assert.equal(detection.type.case, "detection");
    assert.equal(detection.type.value.type.case, "scanv1");
    assert.equal(detection.type.value.type.value.scanner, "grype");
    assert.equal(detection.type.value.type.value.componentVersion, "3.0.0");
    assert.equal(falsePositive.type.case, "falsePositiveDetermination");
    assert.equal(falsePositive.type.value.type, AdvisoryEvent_FalsePositiveDetermination_Type.COMPONENT_VULNERABILITY_MISMATCH);
    assert.equal(falsePositive.type.value.note, "not our build");
    assert.equal(falsePositive.issue, "https://issues.example/42");
    assert.equal(falsePositive.reviewer, "rita");
    assert.equal(falsePositive.reviewState, ReviewState.APPROVED);
    assert.equal(notPlanned.type.case, "fixNotPlanned");
    assert.equal(notPlanned.issue, undefined);
    assert.equal(notPlanned.reviewState, ReviewState.PENDING);
  });

  test("a missing advisory is NOT_FOUND; a malformed uid is INVALID_ARGUMENT", async () => {
    assertRestError(await rest(srv.url, "GET", `${PATH}/${orgA}/${"9".repeat(16)}`), 404, 5, "NOT_FOUND");
    assertRestError(await rest(srv.url, "GET", `${PATH}/not-a-uid`), 400, 3, "INVALID_ARGUMENT");
    await assert.rejects(grpc.call("getAdvisory", { uid: `${orgA}/${"9".repeat(16)}` }), (err: ServiceError) => err.code === 5);
  });
});

/** Filters of ListAdvisories, the advisories of org A each keeps, and how many those are. */
const FILTERS: [string, (a: Json) => boolean, number][] = [
  ["advisory_ids=GO-2022-0236&advisory_ids=GHSA-3ww4-gg4f-jr7f", (a) => ["GO-2022-0236", "GHSA-3ww4-gg4f-jr7f"].includes(a.advisoryId), 3],
  ["legacy_advisory_ids=CGA-LEGACY-1", (a) => a.legacyAdvisoryId === "CGA-LEGACY-1", 1],
  ["aliases=CVE-2021-31525", (a) => a.aliases.includes("CVE-2021-31525"), 2],
  ["aliases=CVE-2024-22859&aliases=CVE-0000-0000", (a) => a.aliases.includes("CVE-2024-22859"), 2],
  ["artifact_names=golang.org/x/net", (a) => a.artifactName === "golang.org/x/net", 2],
  ["artifact_types=apk", (a) => a.artifactType === "apk", 1],
  ["artifact_architectures=x86_64", (a) => a.artifactArchitecture === "x86_64", 1],
  ["component_names=stdlib", (a) => a.componentName === "stdlib", 3],
  ["component_types=pypi&component_types=packagist", (a) => ["pypi", "packagist"].includes(a.componentType), 2],
  ["component_locations=./PKGINFO", (a) => a.componentLocation === "./PKGINFO", 1],
  // origin replaces artifact_names.
  ["origin=golang.org/x/text&artifact_names=stdlib", (a) => a.artifactName === "golang.org/x/text", 2],
  ["query=GOLANG.ORG/X/TEXT", (a) => a.artifactName === "golang.org/x/text", 2],
  ["query=cve-2023-5078", (a) => a.advisoryId === "GHSA-3ww4-gg4f-jr7f", 1],
  ["query=ppp9-7JFF", (a) => a.aliases.includes("GHSA-ppp9-7jff-5vj2"), 1],
  ["query=LibSSL", (a) => a.componentName === "libssl3", 1],
  ["query=golang.org&component_types=go&artifact_names=golang.org/x/net", (a) => a.artifactName === "golang.org/x/net", 2],
  ["query=%25", () => false, 0],
  ["event_types=EVENT_TYPE_FILTER_FIXED", (a) => a.events.some((e: Json) => "fixed" in e), 12],
  ["event_types=EVENT_TYPE_FILTER_FALSE_POSITIVE_DETERMINATION&event_types=EVENT_TYPE_FILTER_PATCHED", (a) => a.uid === hand.uid, 1],
  ["latest_event_type=EVENT_TYPE_FILTER_FIXED", (a) => a.author === "osv-import" && a.advisoryId !== "GO-TEST-UNFIXED", 12],
  ["latest_event_type=EVENT_TYPE_FILTER_DETECTION", (a) => a.advisoryId === "GO-TEST-UNFIXED", 1],
  ["latest_event_type=EVENT_TYPE_FILTER_FALSE_POSITIVE_DETERMINATION", (a) => a.uid === hand.uid, 1],
  ["latest_event_type=EVENT_TYPE_FILTER_FIX_NOT_PLANNED", () => false, 0],
  ["event_review_states=REVIEW_STATE_PENDING", (a) => a.uid === hand.uid, 1],
  ["event_review_states=REVIEW_STATE_APPROVED&event_review_states=REVIEW_STATE_REJECTED", () => true, 14],
  ["event_authors=alice&event_authors=nobody", (a) => a.uid === hand.uid, 1],
  ["event_authors=osv-import", (a) => a.author === "osv-import", 13],
  ["exclude_event_authors=osv-import", (a) => a.uid === hand.uid, 1],
  ["exclude_event_authors=mallory", (a) => a.uid !== hand.uid, 13],
  ["event_reviewers=rita", (a) => a.uid === hand.uid, 1],
];

describeListContract(
  {
    resource: "advisories",
    srv,
    path: PATH,
    seed: async () => ({ root: orgA, items: all }),
    orderFields: ["uid", "advisory_id", "created_at", "updated_at"],
    unsortable: ["name"],
    filters: ({ items }) =>
      FILTERS.map(([query, keep, count]) => {
        assert.equal(items.filter(keep).length, count, `${query}: the expectation selects what the case says`);
        return [query, keep];
      }),
    invalid: [
      ["event_types=EVENT_TYPE_FILTER_UNSPECIFIED", ["event_types"]],
      ["event_review_states=REVIEW_STATE_UNSPECIFIED", ["event_review_states"]],
      ["latest_event_type=EVENT_TYPE_FILTER_UNSPECIFIED", ["latest_event_type"]],
    ],
  },
  () => {
    test("the same filters over gRPC, enums as numbers", async () => {
      const list = async (req: object) =>
        uids((await grpc.call("listAdvisories", { uidp: { descendantsOf: orgA }, pageSize: 200, ...req })).advisories);
      assert.deepEqual(
        await list({ eventTypes: [EventTypeFilter.FIXED] }),
        uids(all.filter((a) => a.events.some((e: Json) => "fixed" in e))),
      );
      assert.deepEqual(await list({ latestEventType: EventTypeFilter.DETECTION }), uids(byId("GO-TEST-UNFIXED")));
      assert.deepEqual(
        await list({ aliases: ["CVE-2021-31525"], componentNames: ["stdlib"] }),
        uids(byId("GO-2022-0236").filter((a) => a.componentName === "stdlib")),
      );
      assert.deepEqual(await list({ eventReviewStates: [ReviewState.PENDING], excludeEventAuthors: ["alice"] }), []);
      assert.deepEqual(await list({ origin: "openssl", artifactNames: ["nothing"] }), [hand.uid]);
      assert.deepEqual(await list({ query: "CRYPTOGRAPHY" }), uids(byId("GHSA-3ww4-gg4f-jr7f")));
    });

    test("a filtered list pages too", async () => {
      const go = all.filter((a) => a.componentType === "go");
      assert.equal(go.length, 11);
      await assertPagedWalks(srv.url, PATH, "advisories", `uidp.descendants_of=${orgA}&component_types=go`, go, ["advisory_id"]);
    });
  },
);

describe("ListAdvisories and GetAdvisory authorization", () => {
  let puller: Caller;
  let reader: Caller;
  const inB = () => `${orgB}/${all[0].uid.split("/")[1]}`;

  before(async () => {
    puller = await createCaller(srv, orgA, "puller", await builtinRole(srv, "registry.pull"));
    reader = await createCaller(srv, orgA, "advisory reader", await builtinRole(srv, "advisories.viewer"));
  });

  test("the administrator sees every advisory of every group", async () => {
    const body = await ok(rest(srv.url, "GET", `${PATH}?page_size=200`));
    assert.equal(body.totalCount, "16");
  });

  test("a caller without advisories.list lists nothing and is denied Get, existing or not", async () => {
    const list = await ok(rest(srv.url, "GET", PATH, undefined, as(puller)));
    assert.deepEqual(list.advisories, []);
    assert.equal(list.totalCount, "0");
    await assertSameDenial(srv, puller, `${PATH}/${hand.uid}`, `${PATH}/${orgA}/${"9".repeat(16)}`);
    const pullerGrpc = grpcClient(AdvisoriesService, srv.port, { token: puller.token });
    try {
      await assert.rejects(pullerGrpc.call("getAdvisory", { uid: hand.uid }), (err: ServiceError) => err.code === 7);
      assert.deepEqual((await pullerGrpc.call("listAdvisories", {})).advisories, []);
    } finally {
      pullerGrpc.close();
    }
  });

  test("the built-in advisories.viewer reads its organization's advisories only", async () => {
    const list = await ok(rest(srv.url, "GET", `${PATH}?page_size=200`, undefined, as(reader)));
    assert.deepEqual(uids(list.advisories), uids(all));
    assert.equal(list.totalCount, "14");
    const filtered = await ok(rest(srv.url, "GET", `${PATH}?aliases=CVE-2024-22859`, undefined, as(reader)));
    assert.deepEqual(
      uids(filtered.advisories),
      uids(all.filter((a) => a.aliases.includes("CVE-2024-22859"))),
      "B's advisory with that alias is not listed",
    );
    assert.deepEqual(
      await ok(rest(srv.url, "GET", `${PATH}/${hand.uid}`, undefined, as(reader))),
      all.find((a) => a.uid === hand.uid),
    );
    const ofB = await ok(rest(srv.url, "GET", `${PATH}?uidp.descendants_of=${orgB}`));
    assert.equal(ofB.totalCount, "2");
    assertRestError(await rest(srv.url, "GET", `${PATH}/${ofB.advisories[0].uid}`, undefined, as(reader)), 403, 7, "PERMISSION_DENIED");
    assertRestError(await rest(srv.url, "GET", `${PATH}/${inB()}`, undefined, as(reader)), 403, 7, "PERMISSION_DENIED");
  });
});

describe("AdvisoriesService is read-only", () => {
  test("it has Get and List only, and the API refuses writes", async () => {
    assert.deepEqual(
      AdvisoriesService.methods.map((m) => m.name),
      ["GetAdvisory", "ListAdvisories"],
    );
    const served = srv.server.restOperations.filter((op) => op.rpc.startsWith("platformapi.vulnerabilities."));
    assert.deepEqual(served.map((op) => `${op.method} ${op.path}`).sort(), [`GET ${PATH}`, `GET ${PATH}/{uid=**}`]);
    const writes: [string, string][] = [
      ["POST", `${PATH}/${orgA}`],
      ["POST", PATH],
      ["PATCH", `${PATH}/${hand.uid}`],
      ["DELETE", `${PATH}/${hand.uid}`],
    ];
    for (const [method, path] of writes) {
      const res = await rest(srv.url, method, path, method === "DELETE" ? undefined : { advisoryId: "CGA-intruder" });
      assert.notEqual(res.status, 200, `${method} ${path}`);
      assert.ok(res.status === 404 || res.status === 405, `${method} ${path}: ${res.status}`);
    }
    const after = await ok(rest(srv.url, "GET", `${PATH}?uidp.descendants_of=${orgA}&page_size=200`));
    assert.deepEqual(after.advisories, all, "nothing changed");
  });
});

describe("record ↔ message conversion", () => {
  test("every event kind survives record → message → record, and so does the advisory", () => {
    const kinds: [string, Record<string, unknown>][] = [
      ["detection", { manual: {} }],
      ["detection", { nvdapi: { cpeSearched: "cpe:2.3:a:openssl:*", cpeFound: "cpe:2.3:a:openssl:openssl:3.0.0" } }],
      [
        "detection",
        { scanv1: { scanner: "grype", subpackage: "libssl3", componentId: "id", componentType: "apk", grypeDbBuilt: "2024-01-01" } },
      ],
      ["fixed", { fixedVersion: "3.0.1", note: "upstream", scannerVersion: "0.74.0" }],
      ["falsePositiveDetermination", { type: "TYPE_INLINE_MITIGATIONS_EXIST", note: "hardened build" }],
      ["analysisNotPlanned", { note: "end of life" }],
      ["fixNotPlanned", { note: "wontfix" }],
      ["pendingUpstreamFix", { note: "waiting" }],
      ["truePositiveDetermination", { note: "confirmed" }],
      ["patched", { patchedVersions: ["3.0.1-r1", "3.0.2-r0"], note: "backport" }],
    ];
    const events: AdvisoryEventRecord[] = kinds.map(([type, data], i) => ({
      uid: `${hand.uid}/${i.toString().padStart(16, "0")}`,
      createTime: 1_700_000_000_000 + i,
      author: `author ${i}`,
      reviewer: i % 2 === 0 ? "" : "rita",
      reviewState: (i % 4) + 1,
      issue: i % 3 === 0 ? null : `https://issues.example/${i}`,
      type,
      data,
    }));
    const record: AdvisoryRecord = { ...hand, events, deleteTime: 1_750_000_000_000 };
    const message = advisoryMessage(record);
    assert.deepEqual(
      message.events.map((e) => e.type.case),
      kinds.map(([type]) => type),
    );
    assert.deepEqual(advisoryRecord(message, hand.parentUid, hand.origin), record);
    assert.deepEqual(advisoryRecord(advisoryMessage({ ...record, legacyAdvisoryId: "", deleteTime: null }), hand.parentUid, hand.origin), {
      ...record,
      legacyAdvisoryId: "",
      deleteTime: null,
    });
  });
});
