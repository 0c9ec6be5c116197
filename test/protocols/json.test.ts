import assert from "node:assert/strict";
import { test } from "node:test";
import { createRegistry } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { file_platformapi_iam_v2beta1_groups, ListGroupsResponseSchema } from "../../gen/platformapi/iam/v2beta1/groups_pb.js";
import { isoMillis, responseJson } from "../../src/codec/json.js";

const registry = createRegistry(file_platformapi_iam_v2beta1_groups);

test("timestamps are RFC 3339 UTC with exactly three fractional digits, as Date#toISOString writes them", () => {
  assert.equal(isoMillis(Date.UTC(2026, 0, 2, 3, 4, 5)), "2026-01-02T03:04:05.000Z");
  assert.equal(isoMillis(Date.UTC(2026, 0, 2, 3, 4, 5, 100)), "2026-01-02T03:04:05.100Z");
  // Every day boundary, leap days and centuries from year 1 to 9999, and random instants.
  const samples = [0, -1, 951_782_400_000, 4_107_542_400_000, -62_135_596_800_000, 253_402_300_799_999];
  for (let day = -719_162; day < 2_932_897; day += 97) samples.push(day * 86_400_000, day * 86_400_000 + 86_399_999);
  for (let i = 0; i < 20_000; i++) samples.push(Math.floor((Math.random() - 0.3) * 2e13));
  for (const ms of samples) assert.equal(isoMillis(ms), new Date(ms).toISOString(), `at ${ms}`);
});

test("responses emit unpopulated fields, int64 as strings, and no empty nextPageToken", () => {
  const json = JSON.parse(
    responseJson(
      ListGroupsResponseSchema,
      {
        groups: [
          {
            uid: "a".repeat(40),
            name: "n",
            createTime: timestampFromMs(1_700_000_000_000),
            updateTime: timestampFromMs(1_700_000_000_120),
          },
        ],
        nextPageToken: "",
        totalCount: 1n,
        skipped: 0,
      },
      registry,
    ),
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
