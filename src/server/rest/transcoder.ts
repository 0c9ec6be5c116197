import { create, type DescField, type DescMethod, type DescService, type JsonObject, type Registry } from "@bufbuild/protobuf";
import { createContextValues, type ContextValues } from "@connectrpc/connect";
import { clientAddressKey } from "../../auth/principal.js";
import { responseJson } from "../../codec/json.js";
import { messageFromJson } from "../../codec/request-json.js";
import { invalidField } from "../../domain/errors.js";
import { lightContext } from "../context.js";
import { areaErrorDomain, DEFAULT_ERROR_DOMAIN, toConnectError } from "../errors.js";
import { isStreamHandler, requestIdKey, type WrappedService } from "../wrap.js";
import { inferredMask } from "./field-mask.js";
import { setPath } from "./json-path.js";
import { applyQuery } from "./query.js";
import { pathVariable, restRoutes, RouteTable, type Route, type RouteMatch } from "./route-table.js";
import { ndjsonLines } from "./stream.js";

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

/** A route found for one method and path, kept by admission for the handling of the same request. */
interface Match {
  method: string;
  path: string;
  found: RouteMatch;
}

/** A transcoding result: what to send back over HTTP. */
export interface RestResponse {
  status: number;
  /** The response's JSON text ("" for a stream). */
  body: string;
  /**
   * A server stream's body, newline-delimited JSON (NDJSON_TYPE, stream.ts), as
   * grpc-gateway renders server streams: a {"result": …} line per message and,
   * when the stream fails after its first message, a last {"error": <Status>}
   * line. Lines are made only as they are read. An error before the first
   * message is thrown by handle(), answered like any other.
   */
  lines?: AsyncIterable<string>;
  /** Response headers a handler set, if any. */
  headers: Headers | undefined;
}

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

/** Thrown when no route matches; `allowed` lists the HTTP methods that would. */
export class RouteNotFoundError extends Error {
  constructor(readonly allowed: string[]) {
    super("route not found");
    this.name = "RouteNotFoundError";
  }
}

/**
 * The generic REST transcoder: built at start-up from every method's
 * google.api.http rule, it turns an HTTP request into the request message,
 * calls the same wrapped handler the Connect and gRPC entry points call, and
 * renders the response as proto3 JSON. No route is written by hand.
 */
export class RestTranscoder {
  private readonly routes: RouteTable;
  /** What admission matched, by the context values it handed on: handle() need not match the same path again. */
  private readonly admitted = new WeakMap<ContextValues, Match>();
  /** Every REST operation served: the source of the OpenAPI document. */
  readonly operations: RestOperation[];

  constructor(
    services: readonly WrappedService[],
    private readonly registry: Registry,
  ) {
    const routes = restRoutes(services);
    this.routes = new RouteTable(routes);
    this.operations = routes.map(restOperation);
  }

  /**
   * ErrorInfo.domain of any error on a request to method and url: the area
   * of the service its route calls, or the default when no route matches.
   */
  errorDomainFor(method: string, url: string): string {
    const q = url.indexOf("?");
    const found = this.routes.match(method === "HEAD" ? "GET" : method, q < 0 ? url : url.slice(0, q));
    return found ? areaErrorDomain(found.route.service.typeName) : DEFAULT_ERROR_DOMAIN;
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
    const found = this.routes.match(req.method, path);
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
    const found =
      admitted && admitted.method === req.method && admitted.path === path ? admitted.found : this.routes.match(req.method, path);
    if (!found) throw new RouteNotFoundError(this.routes.allowedMethods(path));
    const { route, groups } = found;
    let request;
    try {
      if (route.pathOnly && q < 0 && isEmptyBody(req.body)) request = pathOnlyRequest(route, route.pathOnly, groups);
      else {
        const json = requestJson(route, groups, q < 0 ? "" : req.url.slice(q + 1), req.body);
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
    if (isStreamHandler(route.handler)) {
      const messages = route.handler(request, ctx);
      // The response headers as they stand when the call starts, taken before its first message is awaited.
      const headers = ctx.setResponseHeaders();
      const lines = await ndjsonLines(messages, route.method.output, this.registry, areaErrorDomain(route.service.typeName));
      return { status: 200, body: "", lines, headers };
    }
    const result = await route.handler(request, ctx);
    // A body ends with a newline, like any text a shell prints.
    return { status: 200, body: `${responseJson(route.method.output, result, this.registry)}\n`, headers: ctx.setResponseHeaders() };
  }
}

/** The OpenAPI generator's view of a route. */
function restOperation(route: Route): RestOperation {
  return {
    method: route.httpMethod,
    path: route.template.source,
    rpc: `${route.service.typeName}.${route.method.name}`,
    service: route.service,
    descriptor: route.method,
    body: route.body,
    variables: route.template.variables.map((v) => ({ name: v.fieldPath.join("."), multiSegment: v.multiSegment })),
    optionalTrailing: route.template.optionalTrailing,
    queryParams: [...new Set([...route.query.values()].map((q) => q.protoPath))],
    streaming: route.handler.kind === "server_streaming",
  };
}

/** The request's proto3 JSON, from its body, then its query (and form body), then the update mask its body implies, then its path. */
function requestJson(route: Route, groups: string[], rawQuery: string, body: unknown): JsonObject {
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
  if (rawQuery !== "") applyQuery(new URLSearchParams(rawQuery), route, json);
  if (form) applyQuery(form, route, json);
  if (route.maskFrom && json.updateMask === undefined) {
    json.updateMask = inferredMask(route.maskFrom, jsonBody);
  }
  // Path variables last: the path wins over the body.
  route.template.variables.forEach((_, i) => setPath(json, route.variablePaths[i]!, pathVariable(route, groups, i)));
  return json;
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
