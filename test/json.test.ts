import assert from "node:assert/strict";
import { test } from "node:test";
import { createRegistry } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { file_platform_iam_v2beta1_groups, ListGroupsResponseSchema } from "../gen/platform/iam/v2beta1/groups_pb.js";
import { millisTimestamp, responseJson } from "../src/server/json.js";

const registry = createRegistry(file_platform_iam_v2beta1_groups);

test("timestamps always carry exactly three fractional digits", () => {
  assert.equal(millisTimestamp("2026-01-02T03:04:05Z"), "2026-01-02T03:04:05.000Z");
  assert.equal(millisTimestamp("2026-01-02T03:04:05.1Z"), "2026-01-02T03:04:05.100Z");
  assert.equal(millisTimestamp("2026-01-02T03:04:05.123456Z"), "2026-01-02T03:04:05.123Z");
});

test("responses emit unpopulated fields, int64 as strings, and no empty nextPageToken", () => {
  const json = responseJson(
    ListGroupsResponseSchema,
    {
      groups: [{ uid: "a".repeat(40), name: "n", createTime: timestampFromMs(1_700_000_000_000), updateTime: timestampFromMs(1_700_000_000_120) }],
      nextPageToken: "",
      totalCount: 1n,
      skipped: 0,
    },
    registry,
  );
  assert.deepEqual(json, {
    groups: [
      {
        uid: "a".repeat(40),
        name: "n",
        description: "",
        resourceLimits: {},
        verified: false,
        createTime: "2023-11-14T22:13:20.000Z",
        updateTime: "2023-11-14T22:13:20.120Z",
      },
    ],
    totalCount: "1",
    skipped: 0,
  });
});
