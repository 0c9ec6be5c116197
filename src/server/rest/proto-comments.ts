import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { PACKAGE_ROOT } from "../../package-root.js";

/** Where the contract's .proto files are, beside src/ and gen/. */
const PROTO_DIR = join(PACKAGE_ROOT, "proto");

const DECLARATION = /^\s*(message|enum|service)\s+(\w+)\s*\{/;
const RPC = /^\s*rpc\s+(\w+)\s*\(/;
const FIELD = /^\s*(?:optional\s+|repeated\s+)?(?:map\s*<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+/;
const ENUM_VALUE = /^\s*(\w+)\s*=\s*-?\d+/;

/**
 * The leading comments of the contract's declarations, by full name
 * ("platformapi.iam.v2beta1.GroupsService.CreateGroup", "….Group.name").
 * The generated descriptors carry no source info, so the OpenAPI document
 * reads the comments from the .proto files; an absent directory gives none.
 */
export function protoComments(dir = PROTO_DIR): Map<string, string> {
  const out = new Map<string, string>();
  if (!existsSync(dir)) return out;
  for (const file of readdirSync(dir, { recursive: true, encoding: "utf8" })) {
    if (file.endsWith(".proto")) collect(readFileSync(join(dir, file), "utf8"), out);
  }
  return out;
}

/** Adds one file's comments to out; a line-based reading of buf-formatted protos. */
function collect(source: string, out: Map<string, string>): void {
  let pkg = "";
  let depth = 0;
  const scopes: { name: string; kind: string; depth: number }[] = [];
  let pending: string[] = [];
  for (const line of source.split("\n")) {
    const comment = /^\s*\/\/ ?(.*)$/.exec(line);
    if (comment) {
      pending.push(comment[1]!.trimEnd());
      continue;
    }
    const scope = scopes[scopes.length - 1];
    const prefix = scope?.name ?? pkg;
    const directlyIn = scope !== undefined && depth === scope.depth;
    const declared = DECLARATION.exec(line);
    let name: string | undefined;
    if (/^\s*package\s+([\w.]+)\s*;/.test(line)) pkg = /package\s+([\w.]+)/.exec(line)![1]!;
    else if (declared) name = `${prefix}.${declared[2]}`;
    else if (directlyIn && scope.kind === "service") name = RPC.exec(line) ? `${prefix}.${RPC.exec(line)![1]}` : undefined;
    else if (directlyIn && scope.kind === "enum") name = ENUM_VALUE.exec(line) ? `${prefix}.${ENUM_VALUE.exec(line)![1]}` : undefined;
    else if (scope?.kind === "message" && depth <= scope.depth + 1)
      name = FIELD.exec(line) ? `${prefix}.${FIELD.exec(line)![1]}` : undefined;
    const text = pending.join("\n").trim();
    if (name !== undefined && text !== "") out.set(name, text);
    pending = [];
    // Braces inside string literals (paths like "/groups/{uid=**}") and trailing comments do not nest.
    const code = line.replace(/"(?:[^"\\]|\\.)*"/g, '""').replace(/\/\/.*$/, "");
    if (declared) scopes.push({ name: `${prefix}.${declared[2]}`, kind: declared[1]!, depth: depth + 1 });
    for (const ch of code) {
      if (ch === "{") depth++;
      else if (ch === "}") {
        depth--;
        while (scopes.length > 0 && scopes[scopes.length - 1]!.depth > depth) scopes.pop();
      }
    }
  }
}
