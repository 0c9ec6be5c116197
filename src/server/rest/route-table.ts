/**
 * The REST route table, as grpc-gateway's ServeMux holds its patterns: one route per google.api.http binding of
 * every method served, with its compiled path template, the query parameters it takes and where its path
 * variables go in the request. A request's route is looked up among those of its HTTP method and the path's
 * first two segments (and the routes whose template starts with a variable), the most specific template first:
 * the most literal text, then the fewest variables.
 */
import { getOption, ScalarType, type DescField, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import { http } from "../../../gen/google/api/annotations_pb.js";
import type { HttpRule } from "../../../gen/google/api/http_pb.js";
import { invalidField } from "../../domain/errors.js";
import type { WrappedMethod, WrappedService } from "../wrap.js";
import { maskedBodyMessage } from "./field-mask.js";
import { compileTemplate, decodeVariable, type CompiledTemplate } from "./http-template.js";
import { jsonPathOf } from "./json-path.js";
import { queryFields, type QueryField } from "./query.js";

/** One REST binding of one method. */
export interface Route {
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
  /** The body's message, set when PATCH without an explicit mask infers update_mask from the body's keys. */
  maskFrom: DescMessage | null;
  /**
   * The top-level string fields the template's variables name, in order,
   * when they are all the request can hold besides query parameters (no
   * body): a request with no query is then built by setting them directly,
   * which is what proto3 JSON parsing would make of them, without the JSON.
   */
  pathOnly: DescField[] | null;
}

/** The route a request matched, and the raw (still percent-encoded) text of its path variables. */
export interface RouteMatch {
  route: Route;
  groups: string[];
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

function routeOf(
  svc: WrappedService,
  method: DescMethod,
  handler: WrappedMethod,
  binding: { method: string; path: string; body: string },
): Route {
  const template = compileTemplate(binding.path);
  const excluded = new Set(template.variables.map((v) => v.fieldPath.join(".")));
  if (binding.body !== "" && binding.body !== "*") excluded.add(binding.body);
  const query = new Map<string, QueryField>();
  if (binding.body !== "*") queryFields(method.input, excluded, { proto: [], json: [] }, query);
  const variableFields = template.variables.map((v) =>
    v.fieldPath.length === 1 ? method.input.fields.find((f) => f.name === v.fieldPath[0]) : undefined,
  );
  const stringFields = variableFields.filter(
    (f): f is DescField => f?.fieldKind === "scalar" && f.scalar === ScalarType.STRING && f.oneof === undefined,
  );
  return {
    httpMethod: binding.method,
    template,
    body: binding.body,
    method,
    service: svc.service,
    handler,
    query,
    variablePaths: template.variables.map((v) => jsonPathOf(method.input, v.fieldPath)),
    maskFrom: maskedBodyMessage(method.input, binding.body),
    pathOnly: binding.body === "" && stringFields.length === variableFields.length ? stringFields : null,
  };
}

/** A route for every google.api.http binding of every method served, in the order the services declare them. */
export function restRoutes(services: readonly WrappedService[]): Route[] {
  const routes: Route[] = [];
  for (const svc of services) {
    for (const method of svc.service.methods) {
      const handler = svc.handlers[method.localName];
      if (!handler) continue;
      for (const binding of httpBindings(getOption(method, http))) routes.push(routeOf(svc, method, handler, binding));
    }
  }
  return routes;
}

/** The routes, bucketed by HTTP method and template prefix, each bucket most specific first. */
export class RouteTable {
  private readonly buckets = new Map<string, Route[]>();
  private readonly unbucketed: Route[] = [];

  constructor(routes: readonly Route[]) {
    for (const route of routes) {
      if (route.template.prefix === null) this.unbucketed.push(route);
      else {
        const key = `${route.httpMethod} ${route.template.prefix}`;
        const list = this.buckets.get(key) ?? [];
        list.push(route);
        this.buckets.set(key, list);
      }
    }
    const specificity = (r: Route) => [r.template.literalLength, -r.template.variables.length] as const;
    for (const bucket of [...this.buckets.values(), this.unbucketed]) {
      bucket.sort((a, b) => {
        const [la, va] = specificity(a);
        const [lb, vb] = specificity(b);
        return lb - la || vb - va;
      });
    }
  }

  /** The route serving method on path (without its query), or null. */
  match(method: string, path: string): RouteMatch | null {
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

  /** The HTTP methods some route serves this path with. */
  allowedMethods(path: string): string[] {
    const out = new Set<string>();
    for (const routes of [...this.buckets.values(), this.unbucketed]) {
      for (const r of routes) if (r.template.regex.test(path)) out.add(r.httpMethod);
    }
    return [...out];
  }
}

/** The decoded value of a route's i-th path variable; INVALID_ARGUMENT naming it when it is not validly percent-encoded. */
export function pathVariable(route: Route, groups: string[], i: number): string {
  const variable = route.template.variables[i]!;
  try {
    return decodeVariable(groups[i] ?? "", variable.multiSegment);
  } catch {
    throw invalidField(variable.fieldPath.join("."), "is not validly percent-encoded");
  }
}
