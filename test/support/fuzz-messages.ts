/**
 * fast-check arbitraries built from protobuf descriptors: well-typed request
 * messages for any method, and byte strings that are almost, or not at all,
 * protobuf encodings of them.
 */
import { clone, create, ScalarType, toBinary, type DescEnum, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import fc from "fast-check";

/** What one value of a field is: a scalar, an enum or a message. */
type ValueKind =
  | { kind: "scalar"; scalar: ScalarType; longAsString: boolean }
  | { kind: "enum"; enum: DescEnum }
  | { kind: "message"; message: DescMessage };

/** Messages nest at most this deep; deeper message fields stay unset. */
const MAX_DEPTH = 3;
const INT32 = [0, 1, -1, 2147483647, -2147483648];
const UINT32 = [0, 1, 4294967295];
const INT64 = [0n, -1n, 2n ** 63n - 1n, -(2n ** 63n)];
const UINT64 = [0n, 1n, 2n ** 64n - 1n];

function scalarArbitrary(scalar: ScalarType, longAsString: boolean, text: fc.Arbitrary<string>): fc.Arbitrary<unknown> {
  const long = (a: fc.Arbitrary<bigint>) => (longAsString ? a.map(String) : a);
  switch (scalar) {
    case ScalarType.STRING:
      return text;
    case ScalarType.BYTES:
      return fc.uint8Array({ maxLength: 64 });
    case ScalarType.BOOL:
      return fc.boolean();
    case ScalarType.DOUBLE:
      return fc.double();
    case ScalarType.FLOAT:
      return fc.double().map(Math.fround);
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return fc.oneof(fc.constantFrom(...INT32), fc.integer());
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return fc.oneof(fc.constantFrom(...UINT32), fc.integer({ min: 0, max: 4294967295 }));
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return long(fc.oneof(fc.constantFrom(...UINT64), fc.bigInt({ min: 0n, max: 2n ** 64n - 1n })));
    default:
      return long(fc.oneof(fc.constantFrom(...INT64), fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n })));
  }
}

function valueArbitrary(kind: ValueKind, text: fc.Arbitrary<string>, depth: number): fc.Arbitrary<unknown> {
  if (kind.kind === "scalar") return scalarArbitrary(kind.scalar, kind.longAsString, text);
  if (kind.kind === "enum") {
    // Unknown numbers too: open enums must carry them without failing.
    return fc.oneof(fc.constantFrom(...kind.enum.values.map((v) => v.number)), fc.integer({ min: -3, max: 1000 }));
  }
  return messageArbitrary(kind.message, text, depth + 1);
}

function elementKind(field: DescField): ValueKind | null {
  switch (field.fieldKind) {
    case "scalar":
      return { kind: "scalar", scalar: field.scalar, longAsString: field.longAsString };
    case "enum":
      return { kind: "enum", enum: field.enum };
    case "message":
      return { kind: "message", message: field.message };
    case "list":
      if (field.listKind === "scalar") return { kind: "scalar", scalar: field.scalar, longAsString: field.longAsString };
      return field.listKind === "enum" ? { kind: "enum", enum: field.enum } : { kind: "message", message: field.message };
    case "map":
      if (field.mapKind === "scalar") return { kind: "scalar", scalar: field.scalar, longAsString: false };
      return field.mapKind === "enum" ? { kind: "enum", enum: field.enum } : { kind: "message", message: field.message };
  }
}

function mapKeyArbitrary(key: ScalarType, text: fc.Arbitrary<string>): fc.Arbitrary<string> {
  if (key === ScalarType.STRING) return text;
  if (key === ScalarType.BOOL) return fc.constantFrom("true", "false");
  return scalarArbitrary(key, true, text).map(String);
}

/** The arbitrary of one field's value as create() takes it, or null when the field is too deep to fill. */
function fieldArbitrary(field: DescField, text: fc.Arbitrary<string>, depth: number): fc.Arbitrary<unknown> | null {
  const kind = elementKind(field);
  if (!kind || (kind.kind === "message" && depth >= MAX_DEPTH)) return null;
  const one = valueArbitrary(kind, text, depth);
  // Now and then a list far longer than any limit (the same value repeated, so it is cheap to make).
  if (field.fieldKind === "list")
    return fc.oneof(
      { arbitrary: fc.array(one, { maxLength: 4 }), weight: 19 },
      { arbitrary: fc.tuple(one, fc.integer({ min: 1_001, max: 5_000 })).map(([v, n]) => new Array<unknown>(n).fill(v)), weight: 1 },
    );
  if (field.fieldKind === "map") return fc.dictionary(mapKeyArbitrary(field.mapKey, text), one, { maxKeys: 3 });
  return one;
}

/** Random, well-typed messages of desc: any subset of fields set, any oneof case chosen. */
export function messageArbitrary(desc: DescMessage, text: fc.Arbitrary<string>, depth = 0): fc.Arbitrary<Message> {
  const parts: Record<string, fc.Arbitrary<unknown>> = {};
  for (const member of desc.members) {
    if (member.kind === "oneof") {
      const cases = member.fields.flatMap((f) => {
        const value = fieldArbitrary(f, text, depth);
        return value ? [value.map((v) => ({ case: f.localName, value: v }))] : [];
      });
      if (cases.length > 0) parts[member.localName] = fc.oneof(...cases);
    } else {
      const value = fieldArbitrary(member, text, depth);
      if (value) parts[member.localName] = value;
    }
  }
  return fc.record(parts, { requiredKeys: [] }).map((init) => create(desc, init as never));
}

/** Appends a protobuf varint. */
function varint(n: bigint, out: number[]): void {
  let v = n;
  while (v > 0x7fn) {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  }
  out.push(Number(v));
}

/** Byte strings that are hostile as protobuf: bad wire types, lengths past the end, deep groups, bad UTF-8. */
const craftedBytes: fc.Arbitrary<Uint8Array> = fc.oneof(
  // A length-delimited field 1 whose length runs past the end of the buffer.
  fc.bigInt({ min: 1n, max: 2n ** 64n - 1n }).map((len) => {
    const out = [0x0a];
    varint(len, out);
    return Uint8Array.from([...out, 0x61]);
  }),
  // Invalid wire types 6 and 7, and field number 0.
  fc.constantFrom(Uint8Array.from([0x0e, 0x00]), Uint8Array.from([0x0f]), Uint8Array.from([0x00, 0x01]), Uint8Array.from([0x02, 0x00])),
  // Start-group tags of unknown field 2047 nested very deep (a recursive skipper overflows its stack).
  fc.integer({ min: 1_000, max: 100_000 }).map((n) => new Uint8Array(2 * n).map((_, i) => (i % 2 === 0 ? 0xfb : 0x7f))),
  // Field 1 as a string holding invalid UTF-8.
  fc.constantFrom(
    Uint8Array.from([0x0a, 0x02, 0xff, 0xfe]),
    Uint8Array.from([0x0a, 0x03, 0xed, 0xa0, 0x80]),
    Uint8Array.from([0x12, 0x01, 0xc3]),
  ),
  // A varint of more than ten bytes.
  fc.integer({ min: 11, max: 40 }).map((n) => Uint8Array.from([0x08, ...new Array<number>(n).fill(0xff), 0x01])),
);

/** Arbitrary bytes as a request payload: random, crafted, and valid encodings of desc damaged a little. */
export function payloadArbitrary(desc: DescMessage, text: fc.Arbitrary<string>): fc.Arbitrary<Uint8Array> {
  const valid = messageArbitrary(desc, text).map((m) => toBinary(desc, m));
  const damaged = fc
    .tuple(valid, fc.nat(), fc.integer({ min: 0, max: 255 }), fc.constantFrom("flip", "truncate", "append", "duplicate"))
    .map(([bytes, at, byte, how]) => {
      if (bytes.length === 0) return Uint8Array.from([byte]);
      const i = at % bytes.length;
      if (how === "truncate") return bytes.subarray(0, i);
      if (how === "append") return Uint8Array.from([...bytes, byte, 0xff, 0xff]);
      if (how === "duplicate") return Uint8Array.from([...bytes, ...bytes]);
      const copy = Uint8Array.from(bytes);
      copy[i] = byte;
      return copy;
    });
  return fc.oneof(
    { arbitrary: fc.uint8Array({ maxLength: 256 }), weight: 3 },
    { arbitrary: craftedBytes, weight: 2 },
    { arbitrary: damaged, weight: 3 },
    { arbitrary: valid, weight: 1 },
  );
}

/**
 * Text for any string field, path segment or query value: real uids (so some
 * requests get past validation), near misses of them, and garbage.
 */
export function textArbitrary(known: readonly string[]): fc.Arbitrary<string> {
  const hex = fc.string({ unit: fc.constantFrom(..."0123456789abcdef"), minLength: 1, maxLength: 48 });
  const nearMiss = fc
    .constantFrom(...known)
    .chain((k) =>
      fc.constantFrom(
        `${k}/`,
        `${k}/..`,
        `${k}//x`,
        k.toUpperCase(),
        k.slice(0, -1),
        `${k}/${"0".repeat(16)}`,
        `/${k}`,
        `${k}%2F0`,
        `${k}\u0000`,
        ` ${k}`,
      ),
    );
  return fc.oneof(
    { arbitrary: fc.constantFrom(...known), weight: 4 },
    { arbitrary: nearMiss, weight: 2 },
    { arbitrary: hex, weight: 1 },
    { arbitrary: fc.string({ unit: "binary", maxLength: 40 }), weight: 2 },
    { arbitrary: fc.string({ unit: "grapheme", maxLength: 40 }), weight: 1 },
    {
      arbitrary: fc.constantFrom(
        "",
        " ",
        "*",
        "-",
        "..",
        ".",
        "/",
        "//",
        "%2F",
        "%",
        "%zz",
        "\u202e",
        "\ud800",
        "🦄",
        "null",
        "true",
        "0",
        "-1",
        "NaN",
        "<script>",
        "' OR 1=1 --",
        "\\",
        "${x}",
        "a".repeat(10_000),
      ),
      weight: 2,
    },
  );
}

/** A valid message with one or two of its fields (or oneofs) replaced by random well-typed values. */
export function nearValidArbitrary(desc: DescMessage, valid: Message, text: fc.Arbitrary<string>): fc.Arbitrary<Message> {
  if (desc.members.length === 0) return fc.constant(valid);
  return fc
    .tuple(messageArbitrary(desc, text), fc.subarray(desc.members, { minLength: 1, maxLength: Math.min(2, desc.members.length) }))
    .map(([random, members]) => {
      const copy = clone(desc, valid) as unknown as Record<string, unknown>;
      for (const m of members) copy[m.localName] = (random as unknown as Record<string, unknown>)[m.localName];
      return copy as unknown as Message;
    });
}
