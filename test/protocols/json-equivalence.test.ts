import assert from "node:assert/strict";
import { test } from "node:test";
import { create, createRegistry, ScalarType, toBinary, toJson, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { TimestampSchema, ValueSchema } from "@bufbuild/protobuf/wkt";
import { encodeMessage } from "../../src/codec/binary.js";
import { responseJson } from "../../src/codec/json.js";
import { CONTRACT_FILES } from "../../src/services/index.js";

const registry = createRegistry(...CONTRACT_FILES);

function sample(field: DescField, kind: string): unknown {
  if (kind === "enum") return field.enum!.values[1]?.number ?? 0;
  if (kind === "message") return filled(field.message!, 3);
  switch (field.scalar) {
    case ScalarType.STRING:
      return `s-${field.name}`;
    case ScalarType.BOOL:
      return true;
    case ScalarType.BYTES:
      return new Uint8Array([1, 2, 250]);
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return 1.5;
    case ScalarType.INT64:
    case ScalarType.SINT64:
    case ScalarType.SFIXED64:
      return -1234567890123n;
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return 1234567890123n;
    default:
      return 7;
  }
}

/** A message with every field set: lists of two, maps of two, the first member of each oneof. */
function filled(schema: DescMessage, depth: number): Message | undefined {
  if (depth === 0) return undefined;
  switch (schema.typeName) {
    case "google.protobuf.Timestamp":
      return create(schema, { seconds: 1_700_000_000n, nanos: 123_000_000 } as never);
    case "google.protobuf.Duration":
      return create(schema, { seconds: 3600n, nanos: 500_000_000 } as never);
    case "google.protobuf.FieldMask":
      return create(schema, { paths: ["display_name", "oidc.client_id"] } as never);
    case "google.protobuf.Any":
      return undefined;
  }
  const init: Record<string, unknown> = {};
  for (const field of schema.fields) {
    if (field.oneof) continue;
    if (field.fieldKind === "list")
      init[field.localName] = [sample(field, field.listKind), sample(field, field.listKind)].filter((v) => v !== undefined);
    else if (field.fieldKind === "map") {
      const keys = field.mapKey === ScalarType.BOOL ? ["true", "false"] : field.mapKey === ScalarType.STRING ? ["k1", "k2"] : ["1", "2"];
      init[field.localName] = Object.fromEntries(keys.map((k) => [k, sample(field, field.mapKind)]).filter(([, v]) => v !== undefined));
    } else {
      const v = sample(field, field.fieldKind);
      if (v !== undefined) init[field.localName] = v;
    }
  }
  for (const oneof of schema.oneofs) {
    const first = oneof.fields[0]!;
    const v = sample(first, first.fieldKind);
    if (v !== undefined) init[oneof.localName] = { case: first.localName, value: v };
  }
  return create(schema, init as never);
}

function outputs(): DescMessage[] {
  return CONTRACT_FILES.flatMap((f) => f.services.flatMap((s) => s.methods.map((m) => m.output)));
}

test("the compiled JSON writer matches protobuf-es toJson on every response type, filled and empty", () => {
  let compared = 0;
  for (const schema of outputs()) {
    for (const message of [filled(schema, 4)!, create(schema)]) {
      const expected = toJson(schema, message, { alwaysEmitImplicit: true, registry }) as Record<string, unknown>;
      // The only intended differences: an empty nextPageToken is left out.
      if (expected.nextPageToken === "") delete expected.nextPageToken;
      assert.deepEqual(JSON.parse(responseJson(schema, message, registry)), expected, schema.typeName);
      compared++;
    }
  }
  assert.ok(compared >= 40, `compared ${compared} messages`);
});

test("timestamps always carry three fractional digits, even on a whole second", () => {
  const schema = registry.getMessage("platformapi.iam.v2beta1.Group")!;
  const json = JSON.parse(responseJson(schema, { createTime: { seconds: 1_700_000_000n, nanos: 0 } }, registry)) as Record<string, unknown>;
  assert.equal(json.createTime, "2023-11-14T22:13:20.000Z");
});

test("the compiled binary writer writes the same bytes as protobuf-es toBinary on every response type, filled and empty", () => {
  let compared = 0;
  for (const schema of outputs()) {
    for (const message of [filled(schema, 4)!, create(schema)]) {
      assert.deepEqual(encodeMessage(schema, message), toBinary(schema, message), schema.typeName);
      compared++;
    }
  }
  assert.ok(compared >= 40, `compared ${compared} messages`);
  // Zero values of implicit fields are left out, but -0 is not zero.
  for (const init of [
    { seconds: 0n, nanos: 0 },
    { seconds: -1n, nanos: 5 },
  ]) {
    const m = create(TimestampSchema, init);
    assert.deepEqual(encodeMessage(TimestampSchema, m), toBinary(TimestampSchema, m));
  }
  const value = create(ValueSchema, { kind: { case: "numberValue", value: -0 } });
  assert.deepEqual(encodeMessage(ValueSchema, value), toBinary(ValueSchema, value));
});
