import { create, isMessage, ScalarType, toBinary, type DescField, type DescMessage, type Message } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";

/**
 * The protobuf binary form of gRPC responses: the same bytes as protobuf-es
 * toBinary, from writers compiled once per message type. toBinary wraps every
 * message in a reflection object on every call, a measurable share of a cheap
 * gRPC call. Types using what these writers do not handle (maps with non-string
 * keys, delimited encoding) keep using toBinary.
 */
type FieldWriter = (w: BinaryWriter, m: Record<string, unknown>) => void;
type Encoder = (w: BinaryWriter, m: Record<string, unknown>) => void;

const encoders = new WeakMap<DescMessage, Encoder>();

/** The binary encoding of a message of the given type. */
export function encodeMessage(schema: DescMessage, message: Message): Uint8Array {
  const w = new BinaryWriter();
  encoderOf(schema)(w, message as unknown as Record<string, unknown>);
  return w.finish();
}

/** A handler's answer as a message of its type (handlers may answer with a plain object). */
export function asMessage(schema: DescMessage, value: unknown): Message {
  return isMessage(value, schema) ? value : (create(schema, value as never) as Message);
}

/** Well-known types protobuf-es holds as plain JSON values in a message field (an event's data): toBinary converts them. */
const JSON_VALUE_TYPES = new Set(["google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"]);

function encoderOf(schema: DescMessage): Encoder {
  let encoder = encoders.get(schema);
  if (!encoder) {
    // Placeholder for recursive types; replaced below.
    encoders.set(schema, (w, m) => encoder!(w, m));
    encoder = compile(schema);
    encoders.set(schema, encoder);
  }
  return encoder;
}

function compile(schema: DescMessage): Encoder {
  const unsupported = schema.fields.some(
    (f) =>
      ((f.fieldKind === "message" || (f.fieldKind === "list" && f.listKind === "message")) &&
        (f.delimitedEncoding || JSON_VALUE_TYPES.has(f.message.typeName))) ||
      (f.fieldKind === "map" && f.mapKey !== ScalarType.STRING),
  );
  if (unsupported) {
    return (w, m) => {
      w.raw(toBinary(schema, m as unknown as Message));
    };
  }
  const writers = [...schema.fields].sort((a, b) => a.number - b.number).map(fieldWriter);
  return (w, m) => {
    for (let i = 0; i < writers.length; i++) writers[i]!(w, m);
    const unknown = m.$unknown as { no: number; wireType: WireType; data: Uint8Array }[] | undefined;
    if (unknown) for (const u of unknown) w.tag(u.no, u.wireType).raw(u.data);
  };
}

function fieldWriter(field: DescField): FieldWriter {
  const key = field.localName;
  const no = field.number;
  if (field.oneof) {
    const oneof = field.oneof.localName;
    const value = valueWriter(field);
    return (w, m) => {
      const selected = m[oneof] as { case?: string; value?: unknown } | undefined;
      if (selected?.case === key) value(w, selected.value);
    };
  }
  switch (field.fieldKind) {
    case "list": {
      if (field.listKind === "message") {
        const encode = encoderOf(field.message);
        return (w, m) => {
          for (const item of m[key] as Record<string, unknown>[]) {
            w.tag(no, WireType.LengthDelimited).fork();
            encode(w, item);
            w.join();
          }
        };
      }
      const scalar = field.listKind === "enum" ? ScalarType.INT32 : field.scalar;
      const write = scalarWriter(scalar);
      if (field.packed) {
        return (w, m) => {
          const items = m[key] as unknown[];
          if (items.length === 0) return;
          w.tag(no, WireType.LengthDelimited).fork();
          for (const item of items) write(w, item);
          w.join();
        };
      }
      const wire = wireTypeOf(scalar);
      return (w, m) => {
        for (const item of m[key] as unknown[]) write(w.tag(no, wire), item);
      };
    }
    case "map": {
      const valueScalar = field.mapKind === "message" ? undefined : field.mapKind === "enum" ? ScalarType.INT32 : field.scalar;
      const encode = field.mapKind === "message" ? encoderOf(field.message) : undefined;
      const writeValue = valueScalar === undefined ? undefined : scalarWriter(valueScalar);
      const valueWire = valueScalar === undefined ? WireType.LengthDelimited : wireTypeOf(valueScalar);
      return (w, m) => {
        const map = m[key] as Record<string, unknown>;
        for (const k in map) {
          w.tag(no, WireType.LengthDelimited).fork();
          w.tag(1, WireType.LengthDelimited).string(k);
          if (encode) {
            w.tag(2, WireType.LengthDelimited).fork();
            encode(w, map[k] as Record<string, unknown>);
            w.join();
          } else writeValue!(w.tag(2, valueWire), map[k]);
          w.join();
        }
      };
    }
    case "message": {
      const value = valueWriter(field);
      return (w, m) => {
        const v = m[key];
        if (v !== undefined) value(w, v);
      };
    }
    default: {
      // Scalars and enums: written when set (explicit presence) or not the zero value.
      const value = valueWriter(field);
      if (field.presence === FeatureSet_FieldPresence.EXPLICIT) {
        return (w, m) => {
          const v = m[key];
          if (v !== undefined) value(w, v);
        };
      }
      const isZero = zeroTest(field.fieldKind === "enum" ? ScalarType.INT32 : field.scalar);
      return (w, m) => {
        const v = m[key];
        if (!isZero(v)) value(w, v);
      };
    }
  }
}

/** The zero value test toBinary uses to leave implicit-presence fields out. */
function zeroTest(type: ScalarType): (v: unknown) => boolean {
  switch (type) {
    case ScalarType.BOOL:
      return (v) => v === false;
    case ScalarType.STRING:
      return (v) => v === "";
    case ScalarType.BYTES:
      return (v) => v instanceof Uint8Array && v.byteLength === 0;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return (v) => Object.is(v, 0);
    default:
      // Loose comparison matches 0n, 0 and "0".
      return (v) => (v as number) == 0;
  }
}

/** Writes one singular value with its tag. */
function valueWriter(field: DescField): (w: BinaryWriter, v: unknown) => void {
  const no = field.number;
  if (field.fieldKind === "message") {
    const encode = encoderOf(field.message);
    return (w, v) => {
      w.tag(no, WireType.LengthDelimited).fork();
      encode(w, v as Record<string, unknown>);
      w.join();
    };
  }
  const scalar = field.fieldKind === "enum" ? ScalarType.INT32 : (field.scalar as ScalarType);
  const write = scalarWriter(scalar);
  const wire = wireTypeOf(scalar);
  return (w, v) => write(w.tag(no, wire), v);
}

function scalarWriter(type: ScalarType): (w: BinaryWriter, v: unknown) => void {
  switch (type) {
    case ScalarType.STRING:
      return (w, v) => void w.string(v as string);
    case ScalarType.BOOL:
      return (w, v) => void w.bool(v as boolean);
    case ScalarType.DOUBLE:
      return (w, v) => void w.double(v as number);
    case ScalarType.FLOAT:
      return (w, v) => void w.float(v as number);
    case ScalarType.INT32:
      return (w, v) => void w.int32(v as number);
    case ScalarType.INT64:
      return (w, v) => void w.int64(v as bigint);
    case ScalarType.UINT64:
      return (w, v) => void w.uint64(v as bigint);
    case ScalarType.FIXED64:
      return (w, v) => void w.fixed64(v as bigint);
    case ScalarType.BYTES:
      return (w, v) => void w.bytes(v as Uint8Array);
    case ScalarType.FIXED32:
      return (w, v) => void w.fixed32(v as number);
    case ScalarType.SFIXED32:
      return (w, v) => void w.sfixed32(v as number);
    case ScalarType.SFIXED64:
      return (w, v) => void w.sfixed64(v as bigint);
    case ScalarType.SINT64:
      return (w, v) => void w.sint64(v as bigint);
    case ScalarType.UINT32:
      return (w, v) => void w.uint32(v as number);
    case ScalarType.SINT32:
      return (w, v) => void w.sint32(v as number);
  }
}

function wireTypeOf(type: ScalarType): WireType {
  switch (type) {
    case ScalarType.BYTES:
    case ScalarType.STRING:
      return WireType.LengthDelimited;
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return WireType.Bit64;
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
    case ScalarType.FLOAT:
      return WireType.Bit32;
    default:
      return WireType.Varint;
  }
}
