/**
 * REST fuzzing: arbitraries for whole HTTP requests to one operation (path,
 * query string, body, headers), a sender that puts exactly those bytes on the
 * wire, and the check every response must pass.
 */
import assert from "node:assert/strict";
import http from "node:http";
import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import fc from "fast-check";
import type { RestOperation } from "../../src/server/rest/transcoder.js";
import { collectionOf, type FuzzFixture } from "./fuzz-fixture.js";

/** A request as it goes on the wire. */
export interface RawRequest {
  method: string;
  /** The raw request target: path and query, sent byte for byte. */
  target: string;
  headers: Record<string, string>;
  body?: Buffer;
  /** True when the request carries no valid credential (no header, or a bogus one). */
  unauthenticated: boolean;
}

/** A response as read off the wire. */
export interface RawResponse {
  status: number;
  contentType: string;
  text: string;
}

/** What the request arbitraries draw from. */
export interface RestFuzzContext {
  fixture: FuzzFixture;
  adminToken: string;
  text: fc.Arbitrary<string>;
  /** Real page tokens, from every List operation. */
  pageTokens: string[];
  /** Every query parameter name any operation takes. */
  queryNames: string[];
}

const INTEGER_TEXT = [
  "-1",
  "0",
  "1",
  "50",
  "200",
  "201",
  "2147483647",
  "2147483648",
  "-2147483648",
  "-2147483649",
  "4294967296",
  "1000000000",
  "1e9",
  "NaN",
  "Infinity",
  "-0",
  "0x10",
  "1.5",
  " 1",
  "+1",
  "99999999999999999999999",
  "",
  "abc",
];
const BOOL_TEXT = ["true", "false", "1", "0", "TRUE", "yes", "", "null"];
const ORDER_BY = [
  "name",
  "name desc",
  "uid",
  "uid asc",
  "created_at",
  "updated_at desc",
  "create_time",
  "password",
  "name desc desc",
  "name,uid",
  "name, uid desc",
  " ",
  "NAME",
  "name DESC",
  "name;DROP TABLE groups",
  "(name)",
  "1",
  "name\u0000",
  "name asc asc",
  "-name",
];
const TIMESTAMPS = [
  "2024-01-01T00:00:00Z",
  "2024-13-45T99:99:99Z",
  "0000-01-01T00:00:00Z",
  "9999-12-31T23:59:59.999999999Z",
  "10000-01-01T00:00:00Z",
  "2024-01-01",
  "yesterday",
  "",
  "1e400",
  "-62135596801",
];
const DURATIONS = ["86400s", "-1s", "0s", "1e9s", "s", "315576000001s", "1.5s", "1.0000000001s", "86400", "P1D", ""];
const NASTY_SEGMENTS = [
  "",
  ".",
  "..",
  "../..",
  "%2e%2e",
  "%2E%2E%2F%2E%2E",
  "a//b",
  "//",
  "%2F",
  "%2f..%2f",
  "%00",
  "%",
  "%zz",
  "%E2%82",
  "%C0%AF",
  "%FF",
  "~",
  ";",
  "a;b=c",
  "*",
  "**",
  ":",
  ":batchCreate",
  "%3A",
  "%20",
  "+",
  "x".repeat(10_000),
  `${"a".repeat(40)}${"/0123456789abcdef".repeat(300)}`,
];
const SUFFIXES = ["/", "//", "/x", ":x", ":", ":batchCreate", "/..", "/.", "%2F", ";", "#frag", "?", "&", "/%2e%2e"];
const CONTENT_TYPES = [
  "application/json; charset=utf-8",
  "APPLICATION/JSON",
  "application/json;charset=latin1",
  "application/json; charset=utf-16",
  "text/plain",
  "application/x-www-form-urlencoded",
  "multipart/form-data; boundary=x",
  "application/octet-stream",
  "application/grpc",
  "application/connect+json",
  "application/proto",
  "application/json-patch+json",
  "application/*",
  "json",
  ";",
  "",
];
const RAW_BODIES = [
  "{",
  '{"a":',
  "[1,",
  "\u0000",
  "null",
  "true",
  "1",
  '"text"',
  "[]",
  "{}",
  '{"__proto__":{"admin":true}}',
  '{"constructor":{"prototype":{"admin":true}}}',
  "[".repeat(5000) + "]".repeat(5000),
  '{"a":1,"a":2}',
  "\ufeff{}",
  '{"name":"\\ud800"}',
  "1e400",
  "{'single':'quotes'}",
];
const EXTRA_HEADERS = [
  "x-request-id",
  "accept",
  "accept-encoding",
  "connect-protocol-version",
  "x-http-method-override",
  "x-forwarded-for",
  "origin",
  "content-encoding",
  "x-grpc-web",
  "grpc-timeout",
  "cookie",
  "if-match",
];

/** A path, query or header value as bytes node will send: UTF-8 as latin1, controls and spaces escaped. */
function sendable(s: string, escapeSpace = true): string {
  let out = "";
  for (const c of Buffer.from(s, "utf8").toString("latin1")) {
    const n = c.charCodeAt(0);
    const keep = escapeSpace ? n > 0x20 && n !== 0x7f : (n >= 0x20 && n !== 0x7f) || n === 0x09;
    out += keep ? c : `%${n.toString(16).padStart(2, "0").toUpperCase()}`;
  }
  return out;
}

/**
 * encodeURIComponent that also takes lone surrogates, sending each as the
 * three bytes WTF-8 gives it: percent-encoded text that is not valid UTF-8.
 */
export function percentEncode(s: string): string {
  let out = "";
  for (const ch of s) {
    const c = ch.charCodeAt(0);
    if (ch.length === 1 && c >= 0xd800 && c <= 0xdfff) {
      out += [0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f)].map((b) => `%${b.toString(16).toUpperCase()}`).join("");
    } else {
      out += encodeURIComponent(ch);
    }
  }
  return out;
}

/** One character of a token changed (the middle of a JWS or sealed token carries full bits). */
export function tamper(token: string): string {
  const i = Math.floor(token.length / 2);
  return token.slice(0, i) + (token[i] === "A" ? "B" : "A") + token.slice(i + 1);
}

/** The message carried as an operation's body: the request itself ("*") or one of its fields. */
export function bodyMessage(op: RestOperation): DescMessage | undefined {
  if (op.body === "*") return op.descriptor.input;
  const field = op.descriptor.input.fields.find((f) => f.name === op.body);
  return field?.fieldKind === "message" ? field.message : undefined;
}

/** Anything JSON can hold, with the values that break naive validators. */
function junkArbitrary(text: fc.Arbitrary<string>): fc.Arbitrary<unknown> {
  return fc.oneof(
    text,
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.constantFrom(null, true, false, 0, -1, 2 ** 53 + 1, 1.5, "", {}, [], [null], { "": "" }),
    fc.jsonValue({ maxDepth: 3 }),
    fc.array(text, { maxLength: 3 }),
    fc.integer({ min: 1, max: 3000 }).map((depth) => {
      let v: unknown = "deep";
      for (let i = 0; i < depth; i++) v = { a: v };
      return v;
    }),
    fc.integer({ min: 100_000, max: 300_000 }).map((n) => "z".repeat(n)),
  );
}

/** Values shaped like what a field takes, but often wrong: extremes, bad enums, bad times. */
function fieldJson(field: DescField, text: fc.Arbitrary<string>, junk: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  let one: fc.Arbitrary<unknown> = junk;
  const scalar = field.fieldKind === "scalar" || (field.fieldKind === "list" && field.listKind === "scalar") ? field.scalar : undefined;
  const message = field.fieldKind === "message" || (field.fieldKind === "list" && field.listKind === "message") ? field.message : undefined;
  const enumDesc = field.fieldKind === "enum" || (field.fieldKind === "list" && field.listKind === "enum") ? field.enum : undefined;
  if (scalar === ScalarType.STRING) one = text;
  else if (scalar === ScalarType.BOOL) one = fc.constantFrom(true, false, "true", 0, 1, null);
  else if (scalar === ScalarType.BYTES) one = fc.constantFrom("", "!!!", "AAAA", "A", "_-_-", "====");
  else if (scalar !== undefined)
    one = fc.oneof(fc.constantFrom(0, -1, 2 ** 31, 2 ** 53 + 1, 1.5, 1e300, -0), fc.constantFrom(...INTEGER_TEXT));
  else if (enumDesc)
    one = fc.oneof(fc.constantFrom(...enumDesc.values.map((v) => v.name)), fc.constantFrom(999, -1, 1.5, "UNKNOWN", ""), text);
  else if (message?.typeName === "google.protobuf.Timestamp") one = fc.constantFrom(...TIMESTAMPS);
  else if (message?.typeName === "google.protobuf.Duration") one = fc.constantFrom(...DURATIONS);
  else if (message?.typeName === "google.protobuf.FieldMask") one = maskArbitrary(message, text);
  else if (message) one = fc.dictionary(fc.constantFrom(...message.fields.map((f) => f.jsonName), "unknownField"), junk, { maxKeys: 3 });
  if (field.fieldKind === "list") one = fc.array(one, { maxLength: 3 });
  if (field.fieldKind === "map") one = fc.dictionary(text, junk, { maxKeys: 3 });
  return fc.oneof({ arbitrary: one, weight: 3 }, { arbitrary: junk, weight: 1 });
}

/** update_mask values: real paths, output-only and nested ones, unknown names, "*" and malformed lists. */
function maskArbitrary(resource: DescMessage | undefined, text: fc.Arbitrary<string>): fc.Arbitrary<string> {
  const fields = resource?.fields ?? [];
  const nested = fields.flatMap((f) => (f.fieldKind === "message" ? f.message.fields.slice(0, 4).map((g) => `${f.name}.${g.name}`) : []));
  const names = [
    ...fields.map((f) => f.name),
    ...fields.map((f) => f.jsonName),
    ...nested,
    "uid",
    "create_time",
    "createTime",
    "update_time",
    "parent",
    "*",
    "",
    "foo",
    "a.b.c",
    "__proto__",
    "constructor",
    "name.",
    ".name",
    "name..x",
    "NAME",
  ];
  return fc
    .tuple(
      fc.array(fc.oneof({ arbitrary: fc.constantFrom(...names), weight: 4 }, { arbitrary: text, weight: 1 }), { maxLength: 4 }),
      fc.constantFrom(",", ", ", ";", " "),
    )
    .map(([paths, sep]) => paths.join(sep));
}

/** A JSON body shaped like a valid one with a few things changed: wrong types, extra fields, nested junk. */
function mutatedBody(valid: Record<string, unknown>, desc: DescMessage | undefined, text: fc.Arbitrary<string>): fc.Arbitrary<unknown> {
  const junk = junkArbitrary(text);
  const fields = desc?.fields ?? [];
  const define = (o: Record<string, unknown>, key: string, value: unknown) =>
    Object.defineProperty(o, key, { value, enumerable: true, writable: true, configurable: true });
  const extraKeys = fc.constantFrom(
    "uid",
    "createTime",
    "updateTime",
    "create_time",
    "parent",
    "__proto__",
    "constructor",
    "unknownField",
    "@type",
    "",
  );
  type Mutation = (body: Record<string, unknown>) => void;
  const mutations: fc.Arbitrary<Mutation>[] = [
    fc.tuple(extraKeys, junk).map(
      ([k, v]): Mutation =>
        (b) =>
          define(b, k, v),
    ),
    fc.nat().map(
      (n): Mutation =>
        (b) => {
          const keys = Object.keys(b);
          if (keys.length > 0) delete b[keys[n % keys.length]!];
        },
    ),
  ];
  if (fields.length > 0) {
    mutations.push(
      fc.constantFrom(...fields).chain((f) =>
        fc.tuple(fc.constantFrom(f.jsonName, f.name), fieldJson(f, text, junk)).map(
          ([k, v]): Mutation =>
            (b) =>
              define(b, k, v),
        ),
      ),
    );
  }
  return fc.array(fc.oneof(...mutations), { minLength: 1, maxLength: 4 }).map((ms) => {
    const body = structuredClone(valid);
    for (const m of ms) m(body);
    return body;
  });
}

/** Query parameter values fitting (or deliberately not fitting) the parameter's name. */
function queryValueArbitrary(name: string, op: RestOperation, ctx: RestFuzzContext): fc.Arbitrary<string> {
  const { text } = ctx;
  const leaf = name
    .split(".")
    .pop()!
    .replace(/([A-Z])/g, "_$1")
    .toLowerCase();
  if (leaf === "page_size" || leaf === "skip") return fc.oneof(fc.constantFrom(...INTEGER_TEXT), fc.integer().map(String));
  if (leaf === "page_token") {
    const real = ctx.pageTokens.length > 0 ? [fc.constantFrom(...ctx.pageTokens), fc.constantFrom(...ctx.pageTokens).map(tamper)] : [];
    return fc.oneof(
      ...real,
      fc.base64String({ maxLength: 120 }).map((s) => s.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")),
      text,
    );
  }
  if (leaf === "order_by") return fc.oneof(fc.constantFrom(...ORDER_BY), text);
  if (leaf === "update_mask") return maskArbitrary(bodyMessage(op), text);
  if (leaf.startsWith("include_") || leaf === "in_root") return fc.oneof(fc.constantFrom(...BOOL_TEXT), text);
  if (leaf.endsWith("since") || leaf.endsWith("time")) return fc.oneof(fc.constantFrom(...TIMESTAMPS), text);
  return fc.oneof({ arbitrary: text, weight: 4 }, { arbitrary: fc.constantFrom(...INTEGER_TEXT, ...BOOL_TEXT), weight: 1 });
}

/** A query string: known names with fitting or wrong values, unknown names, repeats, odd encodings. */
function queryArbitrary(op: RestOperation, ctx: RestFuzzContext): fc.Arbitrary<string> {
  const camel = op.queryParams.map((p) => p.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()));
  const names = [...op.queryParams, ...camel, ...(op.method === "PATCH" ? ["update_mask", "updateMask"] : [])];
  const others = [
    "foo",
    "PAGE_SIZE",
    "page_size ",
    "uidp",
    "uidp.",
    ".",
    "__proto__",
    "constructor",
    "$alt",
    "alt",
    "access_token",
    "fields",
    "uidp.ids.x",
  ];
  const nameArb = fc.oneof(
    ...(names.length > 0 ? [{ arbitrary: fc.constantFrom(...names), weight: 6 }] : []),
    { arbitrary: fc.constantFrom(...others, ...ctx.queryNames), weight: 2 },
    { arbitrary: ctx.text, weight: 1 },
  );
  const pair = nameArb.chain((name) =>
    fc.tuple(fc.constant(name), queryValueArbitrary(name, op, ctx), fc.constantFrom("encoded", "encoded", "encoded", "raw", "bare")),
  );
  // Sometimes the first parameter again, with another value: a repeated key.
  const pairs = fc
    .tuple(fc.array(pair, { minLength: 1, maxLength: 6 }), fc.option(pair.map(([, v, how]) => [v, how] as const)))
    .map(([list, again]) => (again ? [...list, [list[0]![0], again[0], again[1]] as const] : list));
  return pairs.map((list) =>
    list
      .map(([k, v, how]) =>
        how === "encoded" ? `${percentEncode(k)}=${percentEncode(v)}` : how === "raw" ? `${sendable(k)}=${sendable(v)}` : sendable(k),
      )
      .join("&"),
  );
}

/** The path of a request to op: its template with each variable filled by a valid uid or something hostile. */
function pathArbitrary(op: RestOperation, ctx: RestFuzzContext, clean: boolean): fc.Arbitrary<string> {
  const { fixture, text } = ctx;
  const collection = collectionOf(op);
  const valid = op.method === "POST" ? fixture.parents.get(collection) : fixture.uids.get(collection);
  if (clean) return fc.constant(op.path.replace(/\{[^}]+\}/g, valid ?? fixture.org));
  const uidLike = fc
    .tuple(fc.stringMatching(/^[0-9a-f]{40}$/), fc.array(fc.stringMatching(/^[0-9a-f]{16}$/), { maxLength: 3 }))
    .map(([root, rest]) => [root, ...rest].join("/"));
  const value = fc.oneof(
    { arbitrary: valid ? fc.constant(valid) : fc.constantFrom(...fixture.allUids), weight: 6 },
    { arbitrary: fc.constantFrom(...fixture.allUids), weight: 2 },
    { arbitrary: fc.constantFrom(...fixture.allUids).map((u) => `${u}/..`), weight: 1 },
    { arbitrary: uidLike, weight: 1 },
    { arbitrary: text.map(percentEncode), weight: 2 },
    { arbitrary: text.map((t) => sendable(t)), weight: 1 },
    { arbitrary: fc.constantFrom(...NASTY_SEGMENTS), weight: 2 },
  );
  const variables = op.path.match(/\{[^}]+\}/g) ?? [];
  const suffix = fc.oneof({ arbitrary: fc.constant(""), weight: 12 }, { arbitrary: fc.constantFrom(...SUFFIXES), weight: 1 });
  const prefix = fc.oneof(
    { arbitrary: fc.constant((p: string) => p), weight: 14 },
    {
      arbitrary: fc.constantFrom(
        (p: string) => `/${p}`,
        (p: string) => p.toUpperCase(),
        (p: string) => p.replace("v2beta1", "v2beta2"),
        (p: string) => p.replace(/^\/[^/]+/, "/%69am"),
      ),
      weight: 1,
    },
  );
  return fc
    .tuple(fc.array(value, { minLength: variables.length, maxLength: variables.length }), suffix, prefix)
    .map(([values, end, mangle]) => {
      let i = 0;
      return mangle(op.path).replace(/\{[^}]+\}/gi, () => values[i++]!) + end;
    });
}

/** A fuzzed request body (undefined: none). */
function bodyArbitrary(op: RestOperation, ctx: RestFuzzContext): fc.Arbitrary<string | undefined> {
  const { text } = ctx;
  const valid = (ctx.fixture.bodies.get(op.rpc) ?? {}) as Record<string, unknown>;
  const json = (arb: fc.Arbitrary<unknown>) => arb.map((v) => JSON.stringify(v) as string | undefined);
  const hasBody = op.body !== "";
  return fc.oneof(
    { arbitrary: fc.constant(hasBody ? undefined : "{}"), weight: 1 },
    { arbitrary: json(mutatedBody(valid, bodyMessage(op), text)), weight: hasBody ? 8 : 1 },
    { arbitrary: json(fc.jsonValue({ maxDepth: 4 })), weight: 2 },
    { arbitrary: json(fc.anything({ maxDepth: 3 })), weight: 1 },
    {
      arbitrary: fc.oneof(fc.constantFrom(...RAW_BODIES), fc.string({ unit: "binary", maxLength: 200 })).map((t): string | undefined => t),
      weight: 2,
    },
  );
}

/** The authorization header: mostly the administrator's token, else none, a bogus one, or an odd spelling. */
function authArbitrary(ctx: RestFuzzContext): fc.Arbitrary<{ value?: string; unauthenticated: boolean }> {
  const admin = ctx.adminToken;
  const [h, p] = admin.split(".");
  const algNone = `${Buffer.from('{"alg":"none","typ":"at+jwt"}').toString("base64url")}.${p}.`;
  const bogus = [
    "Bearer",
    "Bearer ",
    "Basic YWRtaW46YWRtaW4=",
    `Bearer ${tamper(admin)}`,
    `Bearer ${admin}x`,
    `Bearer ${h}.${p}.`,
    `Bearer ${algNone}`,
    `Bearer ${"a".repeat(8000)}`,
    `Token ${admin}`,
    `Bearer ${admin}, Bearer ${admin}`,
    "Bearer \u00ff\u00fe",
    `Bearer ${admin.split("").reverse().join("")}`,
  ];
  return fc.oneof(
    { arbitrary: fc.constant({ value: `Bearer ${admin}`, unauthenticated: false }), weight: 6 },
    { arbitrary: fc.constant({ unauthenticated: true }), weight: 2 },
    {
      arbitrary: fc
        .oneof(
          fc.constantFrom(...bogus),
          ctx.text.map((t) => `Bearer ${t}`),
        )
        .map((value) => ({ value, unauthenticated: true })),
      weight: 2,
    },
    // Spellings a server may or may not accept: not counted as unauthenticated.
    {
      arbitrary: fc
        .constantFrom(`bearer ${admin}`, `BEARER ${admin}`, `Bearer  ${admin}`, ` Bearer ${admin} `)
        .map((value) => ({ value, unauthenticated: false })),
      weight: 1,
    },
  );
}

/** The parts of a request the fuzzer varies; the others stay as a valid request has them. */
const DIMENSIONS = ["method", "path", "query", "body", "contentType", "authorization", "headers"] as const;

/**
 * Whole requests to op. Most change one or two parts of a valid request (so
 * each fault reaches as deep as it can); some change every part at once.
 */
export function restRequestArbitrary(op: RestOperation, ctx: RestFuzzContext): fc.Arbitrary<RawRequest> {
  const valid = op.body === "" ? undefined : JSON.stringify(ctx.fixture.bodies.get(op.rpc) ?? {});
  const fuzzed = {
    method: fc.constantFrom(...["GET", "POST", "PUT", "PATCH", "DELETE"].filter((m) => m !== op.method)),
    path: pathArbitrary(op, ctx, false),
    query: queryArbitrary(op, ctx),
    body: bodyArbitrary(op, ctx),
    contentType: fc.oneof({ arbitrary: fc.constantFrom(...CONTENT_TYPES), weight: 4 }, { arbitrary: fc.constant(undefined), weight: 1 }),
    authorization: authArbitrary(ctx),
    headers: fc.dictionary(
      fc.constantFrom(...EXTRA_HEADERS),
      ctx.text.map((t) => sendable(t, false)),
      { minKeys: 1, maxKeys: 3 },
    ),
  };
  const dimensions = fc.oneof(
    { arbitrary: fc.subarray([...DIMENSIONS], { minLength: 1, maxLength: 2 }), weight: 4 },
    { arbitrary: fc.constant<string[]>([...DIMENSIONS]), weight: 1 },
  );
  type Parts = typeof fuzzed;
  type Part<K extends keyof Parts> = Parts[K] extends fc.Arbitrary<infer T> ? T : never;
  return dimensions.chain((dims) => {
    const pick = <K extends keyof Parts>(key: K, clean: Part<K>) =>
      dims.includes(key) ? (fuzzed[key] as fc.Arbitrary<Part<K>>) : fc.constant(clean);
    return fc
      .tuple(
        pick("method", op.method),
        dims.includes("path") ? fuzzed.path : pathArbitrary(op, ctx, true),
        pick("query", ""),
        pick("body", valid),
        pick("contentType", "application/json"),
        pick("authorization", { value: `Bearer ${ctx.adminToken}`, unauthenticated: false }),
        pick("headers", {}),
      )
      .map(([method, path, query, body, contentType, auth, headers]) => {
        const out: Record<string, string> = { ...headers };
        if (auth.value !== undefined) out.authorization = sendable(auth.value, false);
        if (body !== undefined && contentType !== undefined) out["content-type"] = contentType;
        const req: RawRequest = {
          method,
          target: query === "" ? path : `${path}?${query}`,
          headers: out,
          body: body === undefined ? undefined : Buffer.from(body, "utf8"),
          unauthenticated: auth.unauthenticated,
        };
        return Object.assign(req, { [fc.toStringMethod]: () => describeRequest(req, ctx.adminToken) });
      });
  });
}

/** A request as a failure report shows it: the administrator's token by name, long values cut. */
export function describeRequest(req: RawRequest, adminToken: string): string {
  const cut = (s: string) => (s.length > 300 ? `${s.slice(0, 300)}…(${s.length} chars)` : s);
  const headers = Object.entries(req.headers).map(([k, v]) => `${k}: ${cut(v.split(adminToken).join("<admin token>"))}`);
  return [`${req.method} ${cut(req.target)}`, ...headers, req.body === undefined ? "(no body)" : cut(req.body.toString("utf8"))].join("\n");
}

/** Sends req exactly as given (node:http, keep-alive agent) and reads the whole response. */
export function sendRaw(port: number, agent: http.Agent, req: RawRequest): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string | number> = { ...req.headers };
    if (req.body !== undefined) headers["content-length"] = req.body.length;
    const r = http.request({ host: "127.0.0.1", port, method: req.method, path: req.target, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          contentType: String(res.headers["content-type"] ?? ""),
          text: Buffer.concat(chunks).toString("utf8"),
        }),
      );
      res.on("error", reject);
    });
    r.on("error", reject);
    r.end(req.body);
  });
}

const ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo";
/** The HTTP statuses each RPC code may travel with. */
const STATUS_OF_CODE: Record<number, number[]> = {
  1: [499],
  3: [400, 415],
  5: [404],
  6: [409],
  7: [403],
  8: [413, 429, 431],
  9: [400],
  10: [409],
  11: [400],
  12: [405, 501],
  16: [401],
};
/** Text no error may contain: stack frames, SQL, file paths, JavaScript error names. */
export const LEAK =
  /\bat .*\.(ts|js):\d+|SQLITE|sqlite|SELECT |INSERT |node_modules|\/work\/|TypeError|RangeError|ReferenceError|Cannot read propert/;

/**
 * Asserts what every REST response must be: below 500; a 2xx is JSON; an
 * error is exactly {code, message, details} with one ErrorInfo, an HTTP
 * status that matches the code, and no internals. Returns the RPC code (0 on success).
 */
export function checkRestResponse(res: RawResponse): number {
  assert.ok(res.status < 500, `HTTP ${res.status}: ${res.text.slice(0, 500)}`);
  let body: unknown;
  try {
    body = res.text === "" ? undefined : JSON.parse(res.text);
  } catch {
    assert.fail(`HTTP ${res.status} with a body that is not JSON: ${res.text.slice(0, 200)}`);
  }
  if (res.status < 400) {
    assert.equal(res.status, 200, `success is 200, got ${res.status}`);
    assert.ok(typeof body === "object" && body !== null && !Array.isArray(body), "a success body is a JSON object");
    return 0;
  }
  assert.ok(typeof body === "object" && body !== null, `HTTP ${res.status} without an error body`);
  const err = body as { code: unknown; message: unknown; details: { "@type"?: unknown; reason?: unknown; domain?: unknown }[] };
  assert.deepEqual(Object.keys(err).sort(), ["code", "details", "message"], `error body keys: ${res.text.slice(0, 300)}`);
  assert.equal(typeof err.code, "number");
  assert.equal(typeof err.message, "string");
  assert.ok(Array.isArray(err.details), "details is an array");
  assert.ok(
    err.details.every((d) => typeof d["@type"] === "string" && d["@type"].startsWith("type.googleapis.com/google.rpc.")),
    "every detail is a typed google.rpc detail",
  );
  const infos = err.details.filter((d) => d["@type"] === ERROR_INFO);
  assert.equal(infos.length, 1, `exactly one ErrorInfo: ${res.text.slice(0, 300)}`);
  assert.match(String(infos[0]!.reason), /^[A-Z][A-Z0-9_]*$/, "ErrorInfo.reason is UPPER_SNAKE");
  assert.match(String(infos[0]!.domain), /\.api$/, "ErrorInfo.domain names the area");
  const allowed = STATUS_OF_CODE[err.code as number] ?? [];
  assert.ok(allowed.includes(res.status), `code ${String(err.code)} travels with HTTP ${allowed.join("/") || "?"}, not ${res.status}`);
  assert.ok(!LEAK.test(res.text), `internals in an error body: ${res.text.slice(0, 300)}`);
  return err.code as number;
}
