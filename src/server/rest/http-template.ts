/**
 * google.api.http path templates (the grammar of google/api/http.proto):
 *
 *   Template = "/" Segments [ Verb ] ;
 *   Segments = Segment { "/" Segment } ;
 *   Segment  = "*" | "**" | LITERAL | Variable ;
 *   Variable = "{" FieldPath [ "=" Segments ] "}" ;
 *   Verb     = ":" LITERAL ;
 *
 * compiled to an anchored RegExp with one capture group per variable.
 */

/** One variable of a template: the request field it binds and how to decode it. */
export interface TemplateVariable {
  /** Proto field names from the request message down, e.g. ["group", "uid"]. */
  fieldPath: string[];
  /** Multi-segment variables (containing "**" or "/") take "/" and %2F alike as separators. */
  multiSegment: boolean;
}

/** A compiled template. */
export interface CompiledTemplate {
  source: string;
  regex: RegExp;
  variables: TemplateVariable[];
  verb: string | null;
  /** Characters of literal text, used to try more specific templates first. */
  literalLength: number;
  /** The first two literal segments, e.g. "/iam/v2beta1", used to bucket routes; null if fewer. */
  prefix: string | null;
  /** True when the last variable is "{x=**}" and may match zero segments. */
  optionalTrailing: boolean;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** A "*" inside a multi-segment variable is one segment, so it may not hold an encoded "/" (decoded as a separator there). */
function segmentPattern(segment: string, inMultiSegment = false): string {
  if (segment === "*") return inMultiSegment ? "(?:(?!%2[fF])[^/])+" : "[^/]+";
  if (segment === "**") return ".+";
  return escape(segment);
}

/** Splits at "/" outside braces. */
function splitTopLevel(path: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let current = "";
  for (const ch of path) {
    if (ch === "{") depth++;
    if (ch === "}") depth--;
    if (depth < 0) throw new Error(`unbalanced "}" in template`);
    if (ch === "/" && depth === 0) {
      out.push(current);
      current = "";
    } else {
      current += ch;
    }
  }
  if (depth !== 0) throw new Error(`unbalanced "{" in template`);
  out.push(current);
  return out;
}

/** Compiles a template; throws on a malformed one (caught at start-up). */
export function compileTemplate(template: string): CompiledTemplate {
  if (!template.startsWith("/")) throw new Error(`template ${template} must start with "/"`);
  let path = template.slice(1);
  let verb: string | null = null;
  const lastSlash = path.lastIndexOf("/");
  const colon = path.lastIndexOf(":");
  if (colon > lastSlash && !path.slice(colon).includes("}")) {
    verb = path.slice(colon + 1);
    path = path.slice(0, colon);
  }
  const segments = splitTopLevel(path);
  const variables: TemplateVariable[] = [];
  const parts: string[] = [];
  let literalLength = 0;
  const prefixParts: string[] = [];
  let inPrefix = true;
  let optionalTrailing = false;
  segments.forEach((segment, i) => {
    const isLast = i === segments.length - 1;
    if (segment.startsWith("{")) {
      inPrefix = false;
      const inner = segment.slice(1, -1);
      const eq = inner.indexOf("=");
      const fieldPath = (eq < 0 ? inner : inner.slice(0, eq)).split(".");
      const pattern = eq < 0 ? "*" : inner.slice(eq + 1);
      const sub = pattern.split("/");
      const multiSegment = sub.length > 1 || sub.includes("**");
      variables.push({ fieldPath, multiSegment });
      const body = sub.map((part) => segmentPattern(part, multiSegment)).join("/");
      // A trailing "{x=**}" may match zero segments, as grpc-gateway allows:
      // POST /iam/v2beta1/groups reaches CreateGroup with an empty parent.
      if (isLast && pattern === "**" && i > 0) {
        optionalTrailing = true;
        parts.push(`(?:/(${body}))?`);
      } else {
        parts.push(`${i > 0 ? "/" : ""}(${body})`);
      }
      return;
    }
    if (segment === "*" || segment === "**") inPrefix = false;
    else literalLength += segment.length;
    if (inPrefix) prefixParts.push(segment);
    parts.push(`${i > 0 ? "/" : ""}${segmentPattern(segment)}`);
  });
  if (verb !== null) literalLength += verb.length;
  const regex = new RegExp(`^/${parts.join("")}${verb === null ? "" : `:${escape(verb)}`}$`);
  return {
    source: template,
    regex,
    variables,
    verb,
    literalLength,
    prefix: prefixParts.length >= 2 ? `/${prefixParts.slice(0, 2).join("/")}` : null,
    optionalTrailing,
  };
}

/**
 * Decodes a captured variable; throws URIError on malformed escapes.
 * Single-segment values decode fully. In a multi-segment value (a uid path,
 * lowercase hex and "/") an encoded "/" (%2F or %2f) is a separator too:
 * generated clients (openapi-fetch, swagger-client) percent-encode every path
 * parameter. Nothing else decodes to "/", so "%252F" stays the data "%2F".
 */
export function decodeVariable(raw: string, multiSegment: boolean): string {
  if (!multiSegment) return decodeURIComponent(raw);
  return raw
    .split(/\/|%2f/i)
    .map((part) => decodeURIComponent(part))
    .join("/");
}
