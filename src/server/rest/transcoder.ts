import {
  create,
  getOption,
  ScalarType,
  type DescField,
  type DescMessage,
  type DescMethod,
  type DescService,
  type JsonObject,
  type JsonValue,
  type Registry,
} from "@bufbuild/protobuf";
import { createContextValues, type ContextValues } from "@connectrpc/connect";
import { http } from "../../../gen/google/api/annotations_pb.js";
import { field_behavior, FieldBehavior } from "../../../gen/google/api/field_behavior_pb.js";
import type { HttpRule } from "../../../gen/google/api/http_pb.js";
import { clientAddressKey } from "../../auth/principal.js";
import { invalidField } from "../../domain/errors.js";
import { responseJson } from "../../codec/json.js";
import { messageFromJson } from "../../codec/request-json.js";
import { lightContext } from "../context.js";
import { areaErrorDomain, DEFAULT_ERROR_DOMAIN, restErrorBody, toConnectError } from "../errors.js";
import { isStreamHandler, requestIdKey, type WrappedMethod, type WrappedService } from "../wrap.js";
import { compileTemplate, decodeVariable, type CompiledTemplate } from "./http-template.js";

/** How one query parameter maps onto the request message. */
interface QueryField {
  /** JSON names from the request message down to the field. */
  jsonPath: string[];
  /** The dotted proto-name path, e.g. "uidp.descendants_of". */
  protoPath: string;
  field: DescField;
}

/** One REST operation, as the OpenAPI generator describes it. */
export interface RestOperation {
  method: string;
  /** The google.api.http template, e.g. /iam/v2beta1/groups/{uid=**}. */
  path: string;
  /** "package.Service.Method". */
  rpc: string;
  service: DescService;
  descriptor: DescMethod;
  /** "" (no body), "*" or the request field carried as the body. */
  body: string;
  variables: { name: string; multiSegment: boolean }[];
  /** True when a trailing {x=**} may also match zero segments. */
  optionalTrailing: boolean;
  /** Query parameters by dotted proto name. */
  queryParams: string[];
  /** True for a server-streaming method: its body is newline-delimited JSON (RestResponse.lines). */
  streaming: boolean;
}

/** One REST binding of one method. */
interface Route {
  httpMethod: string;
  template: CompiledTemplate;
  /** "" (no body), "*" (whole request) or a top-level field's proto name. */
  body: string;
  method: DescMethod;
  service: WrappedService["service"];
  handler: WrappedMethod;
  query: Map<string, QueryField>;
  /** JSON paths of the template's variables, in order. */
  variablePaths: string[][];
  /** Set when PATCH without an explicit mask infers update_mask from the body's keys. */
  maskFrom: { bodyField: DescField; bodyMessage: DescMessage } | null;
  /**
   * The top-level string fields the template's variables name, in order,
   * when they are all the request can hold besides query parameters (no
   * body): a request with no query is then built by setting them directly,
   * which is what proto3 JSON parsing would make of them, without the JSON.
   */
  pathOnly: DescField[] | null;
}

/** A route found for one method and path, kept by admission for the handling of the same request. */
interface Match {
  method: string;
  path: string;
  found: { route: Route; groups: string[] };
}

/** A transcoding result: what to send back over HTTP. */
export interface RestResponse {
  status: number;
  /** The response's JSON text ("" for a stream). */
  body: string;
  /**
   * A server stream's body, newline-delimited JSON (NDJSON_TYPE), as
   * grpc-gateway renders server streams: a {"result": …} line per message and,
   * when the stream fails after its first message, a last {"error": <Status>}
   * line. Lines are made only as they are read. An error before the first
   * message is thrown by handle(), answered like any other.
   */
  lines?: AsyncIterable<string>;
  /** Response headers a handler set, if any. */
  headers: Headers | undefined;
}

/** The Content-Type of a server stream's REST body. */
export const NDJSON_TYPE = "application/x-ndjson";

/** A request as the transcoder sees it: method, raw path and query, parsed headers and body. */
export interface RestRequest {
  method: string;
  /** The raw request target, still percent-encoded. */
  url: string;
  headers: Headers;
  /** Parsed JSON body, or URLSearchParams for a form body, or undefined. */
  body: unknown;
  /** Aborts when the client goes away (a server stream's end), or a function making that signal on first use. */
  signal?: AbortSignal | (() => AbortSignal);
  /** Carried to the handler (requestIdKey) for logs. */
  requestId: string;
  /** The client's address (clientAddressKey), for per-address limits: the request's clientAddress (see client-address.ts). */
  clientAddress?: string;
  /** The context values admit() filled for this request, if it was admitted before its body was read. */
  values?: ContextValues;
}

/** What admit() needs of a request: no body, which has not been read yet. */
export type RestAdmission = Omit<RestRequest, "body" | "signal" | "values">;

const SCALAR_JSON_NUMBER = new Set([ScalarType.INT32, ScalarType.UINT32, ScalarType.SINT32, ScalarType.FIXED32, ScalarType.SFIXED32]);
const SCALAR_INTEGER = new Set([
  ...SCALAR_JSON_NUMBER,
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);
const STRING_FORM_MESSAGES = new Set(["google.protobuf.Timestamp", "google.protobuf.Duration", "google.protobuf.FieldMask"]);

/** Thrown when no route matches; `allowed` lists the HTTP methods that would. */
export class RouteNotFoundError extends Error {
  constructor(readonly allowed: string[]) {
    super("route not found");
    this.name = "RouteNotFoundError";
  }
}

function httpBindings(rule: HttpRule): { method: string; path: string; body: string }[] {
  const out: { method: string; path: string; body: string }[] = [];
  const add = (r: HttpRule) => {
    const p = r.pattern;
    if (p.case === undefined) return;
    if (p.case === "custom") out.push({ method: p.value.kind.toUpperCase(), path: p.value.path, body: r.body });
    else out.push({ method: p.case.toUpperCase(), path: p.value, body: r.body });
    for (const extra of r.additionalBindings) add(extra);
  };
  add(rule);
  return out;
}

/** Every leaf field reachable as a query parameter, by proto and JSON dotted names. */
function queryFields(
  message: DescMessage,
  excluded: Set<string>,
  prefix: { proto: string[]; json: string[] },
  out: Map<string, QueryField>,
  depth = 0,
): void {
  if (depth > 4) return;
  for (const field of message.fields) {
    const protoPath = [...prefix.proto, field.name];
    if (excluded.has(protoPath.join("."))) continue;
    const jsonPath = [...prefix.json, field.jsonName];
    const isLeafMessage = field.fieldKind === "message" && STRING_FORM_MESSAGES.has(field.message.typeName);
    if (
      field.fieldKind === "scalar" ||
      field.fieldKind === "enum" ||
      isLeafMessage ||
      (field.fieldKind === "list" && field.listKind !== "message")
    ) {
      const entry = { jsonPath, protoPath: protoPath.join("."), field };
      out.set(protoPath.join("."), entry);
      out.set(jsonPath.join("."), entry);
    } else if (field.fieldKind === "message") {
      queryFields(field.message, excluded, { proto: protoPath, json: jsonPath }, out, depth + 1);
    }
  }
}

function setPath(target: JsonObject, path: string[], value: JsonValue): void {
  let node = target;
  for (const key of path.slice(0, -1)) {
    const next = node[key];
    if (next === undefined || next === null || typeof next !== "object" || Array.isArray(next)) node[key] = {};
    node = node[key] as JsonObject;
  }
  node[path[path.length - 1]!] = value;
}

const RFC3339 = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/;

const snakeToCamel = (s: string) => s.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

/** Converts one query value to the JSON form fromJson expects for the field; throws INVALID_ARGUMENT. */
function queryValue(name: string, raw: string, field: DescField): JsonValue {
  const scalar =
    field.fieldKind === "scalar" ? field.scalar : field.fieldKind === "list" && field.listKind === "scalar" ? field.scalar : undefined;
  if (scalar === ScalarType.BOOL) {
    if (raw === "true" || raw === "1") return true;
    if (raw === "false" || raw === "0") return false;
    throw invalidField(name, "must be true or false");
  }
  if (scalar !== undefined && SCALAR_INTEGER.has(scalar)) {
    if (!/^-?\d{1,20}$/.test(raw)) throw invalidField(name, "must be an integer");
    if (SCALAR_JSON_NUMBER.has(scalar)) {
      const n = Number(raw);
      const unsigned = scalar === ScalarType.UINT32 || scalar === ScalarType.FIXED32;
      if (n > (unsigned ? 4294967295 : 2147483647) || n < (unsigned ? 0 : -2147483648)) throw invalidField(name, "is out of range");
      return n;
    }
    return raw;
  }
  if (field.fieldKind === "message" && field.message.typeName === "google.protobuf.Timestamp") {
    if (!RFC3339.test(raw) || Number.isNaN(Date.parse(raw)))
      throw invalidField(name, "must be an RFC 3339 timestamp, e.g. 2026-01-02T03:04:05Z");
    return raw;
  }
  if (field.fieldKind === "message" && field.message.typeName === "google.protobuf.FieldMask") {
    return raw
      .split(",")
      .map((p) => p.trim())
      .filter((p) => p !== "")
      .map((p) => p.split(".").map(snakeToCamel).join("."))
      .join(",");
  }
  return raw;
}

/**
 * The generic REST transcoder: built at start-up from every method's
 * google.api.http rule, it turns an HTTP request into the request message,
 * calls the same wrapped handler the Connect and gRPC entry points call, and
 * renders the response as proto3 JSON. No route is written by hand.
 */
export class RestTranscoder {
  private readonly buckets = new Map<string, Route[]>();
  private readonly unbucketed: Route[] = [];
  /** What admission matched, by the context values it handed on: handle() need not match the same path again. */
  private readonly admitted = new WeakMap<ContextValues, Match>();
  /** Every REST operation served: the source of the OpenAPI document. */
  readonly operations: RestOperation[] = [];

  constructor(
    services: readonly WrappedService[],
    private readonly registry: Registry,
  ) {
    for (const svc of services) {
      for (const method of svc.service.methods) {
        const handler = svc.handlers[method.localName];
        if (!handler) continue;
        for (const binding of httpBindings(getOption(method, http))) this.add(svc, method, handler, binding);
      }
    }
    const specificity = (r: Route) => [r.template.literalLength, -r.template.variables.length] as const;
    for (const routes of [...this.buckets.values(), this.unbucketed]) {
      routes.sort((a, b) => {
        const [la, va] = specificity(a);
        const [lb, vb] = specificity(b);
        return lb - la || vb - va;
      });
    }
  }

  private add(
    svc: WrappedService,
    method: DescMethod,
    handler: WrappedMethod,
    binding: { method: string; path: string; body: string },
  ): void {
    const template = compileTemplate(binding.path);
    const excluded = new Set(template.variables.map((v) => v.fieldPath.join(".")));
    if (binding.body !== "" && binding.body !== "*") excluded.add(binding.body);
    const query = new Map<string, QueryField>();
    if (binding.body !== "*") queryFields(method.input, excluded, { proto: [], json: [] }, query);
    let maskFrom: Route["maskFrom"] = null;
    const maskField = method.input.fields.find((f) => f.name === "update_mask");
    const bodyField = method.input.fields.find((f) => f.name === binding.body);
    if (maskField && bodyField?.fieldKind === "message") maskFrom = { bodyField, bodyMessage: bodyField.message };
    const variablePaths = template.variables.map((v) => jsonPathOf(method.input, v.fieldPath));
    const variableFields = template.variables.map((v) =>
      v.fieldPath.length === 1 ? method.input.fields.find((f) => f.name === v.fieldPath[0]) : undefined,
    );
    const stringFields = variableFields.filter(
      (f): f is DescField => f?.fieldKind === "scalar" && f.scalar === ScalarType.STRING && f.oneof === undefined,
    );
    const route: Route = {
      httpMethod: binding.method,
      template,
      body: binding.body,
      method,
      service: svc.service,
      handler,
      query,
      variablePaths,
      maskFrom,
      pathOnly: binding.body === "" && stringFields.length === variableFields.length ? stringFields : null,
    };
    if (template.prefix === null) this.unbucketed.push(route);
    else {
      const key = `${binding.method} ${template.prefix}`;
      const list = this.buckets.get(key) ?? [];
      list.push(route);
      this.buckets.set(key, list);
    }
    const queryParams = [...new Set([...query.values()].map((q) => q.protoPath))];
    this.operations.push({
      method: binding.method,
      path: binding.path,
      rpc: `${svc.service.typeName}.${method.name}`,
      service: svc.service,
      descriptor: method,
      body: binding.body,
      variables: template.variables.map((v) => ({ name: v.fieldPath.join("."), multiSegment: v.multiSegment })),
      optionalTrailing: template.optionalTrailing,
      queryParams,
      streaming: handler.kind === "server_streaming",
    });
  }

  private match(method: string, path: string): { route: Route; groups: string[] } | null {
    const second = path.indexOf("/", path.indexOf("/", 1) + 1);
    const prefix = second < 0 ? path.replace(/:[^/]*$/, "") : path.slice(0, second);
    for (const routes of [this.buckets.get(`${method} ${prefix}`), this.unbucketed]) {
      if (!routes) continue;
      for (const route of routes) {
        if (route.httpMethod !== method) continue;
        const m = route.template.regex.exec(path);
        if (m) return { route, groups: m.slice(1) };
      }
    }
    return null;
  }

  /**
   * ErrorInfo.domain of any error on a request to method and url: the area
   * of the service its route calls, or the default when no route matches.
   */
  errorDomainFor(method: string, url: string): string {
    const q = url.indexOf("?");
    const found = this.match(method === "HEAD" ? "GET" : method, q < 0 ? url : url.slice(0, q));
    return found ? areaErrorDomain(found.route.service.typeName) : DEFAULT_ERROR_DOMAIN;
  }

  /** True when some route serves this path with any HTTP method. */
  allowedMethods(path: string): string[] {
    const out = new Set<string>();
    for (const routes of [...this.buckets.values(), this.unbucketed]) {
      for (const r of routes) if (r.template.regex.test(path)) out.add(r.httpMethod);
    }
    return [...out];
  }

  /**
   * Admits a request from its method, URL and headers before its body is
   * read (WrappedHandler.admit): the context values it returns, carrying
   * the authenticated caller, go to handle() with the body; needsToken says
   * whether the route needs a token (how large a body it may read). A URL no
   * route matches is admitted: handle() answers it.
   */
  async admit(req: RestAdmission): Promise<{ values: ContextValues; needsToken: boolean }> {
    const values = requestValues(req);
    const q = req.url.indexOf("?");
    const path = q < 0 ? req.url : req.url.slice(0, q);
    const found = this.match(req.method, path);
    if (found) this.admitted.set(values, { method: req.method, path, found });
    if (found) await found.route.handler.admit({ requestHeader: req.headers, values, protocolName: "rest", timeoutMs: () => undefined });
    // No route: no body is read (the answer is a 404 or 405), so it needs no more than an anonymous one.
    return { values, needsToken: found?.route.handler.needsToken ?? false };
  }

  /**
   * Handles one request. Throws RouteNotFoundError when no route matches, and
   * ApiError / ConnectError for anything else (rendered by the caller).
   */
  async handle(req: RestRequest): Promise<RestResponse> {
    const q = req.url.indexOf("?");
    const path = q < 0 ? req.url : req.url.slice(0, q);
    const admitted = req.values && this.admitted.get(req.values);
    const found = admitted && admitted.method === req.method && admitted.path === path ? admitted.found : this.match(req.method, path);
    if (!found) throw new RouteNotFoundError(this.allowedMethods(path));
    const { route, groups } = found;
    let request;
    try {
      if (route.pathOnly && q < 0 && isEmptyBody(req.body)) request = pathOnlyRequest(route, route.pathOnly, groups);
      else {
        const json = this.requestJson(route, groups, q < 0 ? "" : req.url.slice(q + 1), req.body);
        const bodyField = route.body !== "" && route.body !== "*" ? route.body : "";
        request = messageFromJson(route.method.input, json, { bodyField, registry: this.registry });
      }
    } catch (err) {
      // Decoding failures belong to the method's service, like its own errors.
      throw toConnectError(err, areaErrorDomain(route.service.typeName));
    }
    const ctx = lightContext({
      service: route.service,
      method: route.method,
      protocolName: "rest",
      requestMethod: req.method,
      url: req.url,
      requestHeader: req.headers,
      // A unary call runs to completion (its signal never aborts, and costs nothing); a stream ends with its client.
      signal: isStreamHandler(route.handler) ? req.signal : undefined,
      values: req.values ?? requestValues(req),
    });
    if (isStreamHandler(route.handler)) return this.stream(route, route.handler(request, ctx), ctx.setResponseHeaders());
    const result = await route.handler(request, ctx);
    // A body ends with a newline, like any text a shell prints.
    return { status: 200, body: `${responseJson(route.method.output, result, this.registry)}\n`, headers: ctx.setResponseHeaders() };
  }

  /**
   * A server stream's answer, once its first message (or its end) is there:
   * until then, an error is thrown, so it gets its HTTP status and the usual
   * error body; afterwards it becomes the body's last line.
   */
  private async stream(route: Route, messages: AsyncIterable<unknown>, headers: Headers | undefined): Promise<RestResponse> {
    const iterator = messages[Symbol.asyncIterator]();
    const first = await iterator.next();
    const output = route.method.output;
    const domain = areaErrorDomain(route.service.typeName);
    const registry = this.registry;
    async function* lines(): AsyncGenerator<string> {
      try {
        for (let next = first; !next.done; next = await iterator.next()) yield `{"result":${responseJson(output, next.value, registry)}}\n`;
      } catch (err) {
        yield `${JSON.stringify({ error: restErrorBody(toConnectError(err, domain)).body })}\n`;
      } finally {
        // The reader stopped early (its client went away): the handler is told, and records its call.
        await iterator.return?.();
      }
    }
    return { status: 200, body: "", lines: lines(), headers };
  }

  private requestJson(route: Route, groups: string[], rawQuery: string, body: unknown): JsonObject {
    const json: JsonObject = {};
    const form = body instanceof URLSearchParams ? body : null;
    const jsonBody = form ? undefined : body;
    if (route.body === "") {
      if (jsonBody !== undefined && !(typeof jsonBody === "object" && jsonBody !== null && Object.keys(jsonBody).length === 0)) {
        throw invalidField("body", `${route.httpMethod} ${route.template.source} takes no request body`);
      }
    } else if (jsonBody !== undefined) {
      if (typeof jsonBody !== "object" || jsonBody === null || Array.isArray(jsonBody)) throw invalidField("body", "must be a JSON object");
      if (route.body === "*") Object.assign(json, jsonBody);
      else {
        const field = route.method.input.fields.find((f) => f.name === route.body)!;
        json[field.jsonName] = jsonBody as JsonObject;
      }
    } else if (form && route.body !== "") {
      throw invalidField("body", "must be JSON (Content-Type: application/json)");
    }
    if (rawQuery !== "") this.applyQuery(route, new URLSearchParams(rawQuery), json);
    if (form) this.applyQuery(route, form, json);
    if (route.maskFrom && json.updateMask === undefined) {
      json.updateMask = inferredMask(route.maskFrom.bodyMessage, jsonBody);
    }
    // Path variables last: the path wins over the body.
    route.template.variables.forEach((_, i) => setPath(json, route.variablePaths[i]!, pathVariable(route, groups, i)));
    return json;
  }

  private applyQuery(route: Route, params: URLSearchParams, json: JsonObject): void {
    const seen = new Set<string>();
    for (const [name, raw] of params) {
      const entry = route.query.get(name);
      if (!entry) throw invalidField(name, `is not a query parameter of ${route.httpMethod} ${route.template.source}`);
      const value = queryValue(name, raw, entry.field);
      if (entry.field.fieldKind === "list") {
        const current = getPath(json, entry.jsonPath);
        setPath(json, entry.jsonPath, [...(Array.isArray(current) ? current : []), value]);
      } else {
        const key = entry.jsonPath.join(".");
        if (seen.has(key)) throw invalidField(name, "is given more than once");
        seen.add(key);
        setPath(json, entry.jsonPath, value);
      }
    }
  }
}

/** The decoded value of a route's i-th path variable; INVALID_ARGUMENT naming it when it is not validly percent-encoded. */
function pathVariable(route: Route, groups: string[], i: number): string {
  const variable = route.template.variables[i]!;
  try {
    return decodeVariable(groups[i] ?? "", variable.multiSegment);
  } catch {
    throw invalidField(variable.fieldPath.join("."), "is not validly percent-encoded");
  }
}

/** Whether a request carries no body: none at all, or a JSON object without keys (which a body-less route accepts). */
function isEmptyBody(body: unknown): boolean {
  if (body === undefined) return true;
  if (typeof body !== "object" || body === null || Array.isArray(body) || body instanceof URLSearchParams) return false;
  for (const _ in body) return false;
  return true;
}

/** The request of a route whose variables name top-level string fields only, from its path alone (Route.pathOnly). */
function pathOnlyRequest(route: Route, fields: DescField[], groups: string[]) {
  const request = create(route.method.input) as unknown as Record<string, unknown>;
  fields.forEach((field, i) => (request[field.localName] = pathVariable(route, groups, i)));
  return request;
}

/** A request's context values before anything is known of its caller: its id and address. */
function requestValues(req: RestAdmission): ContextValues {
  return createContextValues()
    .set(requestIdKey, req.requestId)
    .set(clientAddressKey, req.clientAddress ?? "");
}

function getPath(json: JsonObject, path: string[]): JsonValue | undefined {
  let node: JsonValue | undefined = json;
  for (const key of path) {
    if (node === null || typeof node !== "object" || Array.isArray(node)) return undefined;
    node = node[key];
  }
  return node;
}

function jsonPathOf(message: DescMessage, protoPath: string[]): string[] {
  const out: string[] = [];
  let current: DescMessage | undefined = message;
  for (const name of protoPath) {
    const field: DescField | undefined = current?.fields.find((f) => f.name === name);
    if (!field) throw new Error(`template variable ${protoPath.join(".")} names no field of ${message.typeName}`);
    out.push(field.jsonName);
    current = field.fieldKind === "message" ? field.message : undefined;
  }
  return out;
}

/**
 * The update mask a PATCH without one implies: the body's keys that name
 * writable fields (grpc-gateway's behaviour). Output-only keys are ignored
 * rather than rejected (unknown ones are refused by checkKnownFields).
 */
function inferredMask(resource: DescMessage, body: unknown): string {
  if (typeof body !== "object" || body === null) return "";
  const paths: string[] = [];
  for (const key of Object.keys(body)) {
    const field = resource.fields.find((f) => f.jsonName === key || f.name === key);
    if (!field || getOption(field, field_behavior).includes(FieldBehavior.OUTPUT_ONLY)) continue;
    paths.push(field.jsonName);
  }
  return paths.join(",");
}
