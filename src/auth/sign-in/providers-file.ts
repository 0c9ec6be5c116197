import { readFileSync } from "node:fs";
import { canonicalIssuer } from "../../domain/issuer.js";

/** An upstream OpenID provider the operator configured for people to sign in at (PLATFORM_SIGN_IN_PROVIDERS_FILE). */
export interface SignInProvider {
  /** Short stable name, in URLs (`provider=dex`) and in flows (`op:dex`). */
  id: string;
  /** What the sign-in page shows ("Sign in with …"). */
  name: string;
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Scopes asked for besides openid (default email and profile). */
  scopes: string[];
}

const SETTING = "PLATFORM_SIGN_IN_PROVIDERS_FILE";
/** Providers one file may list: a sign-in page is a short list of buttons. */
export const MAX_SIGN_IN_PROVIDERS = 20;
const ID = /^[a-z0-9][a-z0-9-]{0,31}$/;
const PRINTABLE = /^[\x20-\x7e]{1,64}$/;
const CLIENT_TEXT = /^[\x21-\x7e]{1,256}$/;
/** RFC 6749 §3.3 scope-token characters. */
const SCOPE = /^[\x21\x23-\x5b\x5d-\x7e]{1,64}$/;
const KEYS = new Set(["id", "name", "issuer", "clientId", "clientSecret", "clientSecretFile", "scopes"]);
const LOOPBACK_HOSTS = new Set(["127.0.0.1", "[::1]", "localhost"]);

/**
 * Reads the providers file: a JSON list of `{id, name, issuer, clientId,
 * clientSecret | clientSecretFile, scopes?}`. Every mistake is one line in
 * problems naming the file, the entry and the field, so the operator fixes
 * them all in one go; the providers are returned only when there is none.
 * Issuers must be canonical https URLs (http only on a loopback host, for a
 * provider on the same machine): the client secret travels to them.
 */
export function readSignInProviders(path: string, problems: string[]): SignInProvider[] {
  if (path === "") return [];
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (err) {
    problems.push(`${SETTING}=${path}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
    return [];
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    problems.push(`${SETTING}=${path}: is not JSON (${(err as Error).message})`);
    return [];
  }
  if (!Array.isArray(doc)) {
    problems.push(`${SETTING}=${path}: must be a JSON list of providers, [{"id": …, "issuer": …, "clientId": …}, …]`);
    return [];
  }
  if (doc.length > MAX_SIGN_IN_PROVIDERS)
    problems.push(`${SETTING}=${path}: lists ${doc.length} providers; at most ${MAX_SIGN_IN_PROVIDERS}`);
  const before = problems.length;
  const providers: SignInProvider[] = [];
  const seen = new Set<string>();
  doc.forEach((entry: unknown, i) => {
    const where = `${SETTING}=${path}: provider ${i + 1}`;
    const provider = readProvider(entry, where, problems);
    if (!provider) return;
    if (seen.has(provider.id)) problems.push(`${where}: id ${provider.id} is used by an earlier provider`);
    seen.add(provider.id);
    providers.push(provider);
  });
  return problems.length === before ? providers : [];
}

/** One entry, or null with its problems pushed. */
function readProvider(entry: unknown, where: string, problems: string[]): SignInProvider | null {
  if (typeof entry !== "object" || entry === null || Array.isArray(entry)) {
    problems.push(`${where}: must be an object`);
    return null;
  }
  const e = entry as Record<string, unknown>;
  const before = problems.length;
  for (const key of Object.keys(e)) if (!KEYS.has(key)) problems.push(`${where}: unknown field ${JSON.stringify(key)}`);
  const text = (field: string, rule: RegExp, what: string): string => {
    const value = e[field];
    if (typeof value === "string" && rule.test(value)) return value;
    problems.push(`${where}: ${field} ${value === undefined ? "is required" : `must be ${what}`}`);
    return "";
  };
  const id = text("id", ID, "1 to 32 lowercase letters, digits and dashes");
  const name = e.name === undefined ? id : text("name", PRINTABLE, "1 to 64 printable characters");
  const issuer = text("issuer", /^\S{1,2048}$/, "a URL");
  if (issuer !== "") {
    const problem = issuerProblem(issuer);
    if (problem) problems.push(`${where}: issuer ${problem}`);
  }
  const clientId = text("clientId", CLIENT_TEXT, "1 to 256 printable characters without spaces");
  const clientSecret = secretOf(e, where, problems);
  const scopes = e.scopes === undefined ? ["email", "profile"] : e.scopes;
  if (!Array.isArray(scopes) || scopes.length > 20 || !scopes.every((s) => typeof s === "string" && SCOPE.test(s))) {
    problems.push(`${where}: scopes must be a list of at most 20 scope names`);
  }
  if (problems.length > before) return null;
  return { id, name, issuer, clientId, clientSecret, scopes: (scopes as string[]).filter((s) => s !== "openid") };
}

/** clientSecret, or the trimmed content of clientSecretFile: exactly one of them. */
function secretOf(e: Record<string, unknown>, where: string, problems: string[]): string {
  const inline = e.clientSecret;
  const file = e.clientSecretFile;
  if ((inline === undefined) === (file === undefined)) {
    problems.push(`${where}: set exactly one of clientSecret and clientSecretFile`);
    return "";
  }
  if (inline !== undefined) {
    if (typeof inline === "string" && CLIENT_TEXT.test(inline)) return inline;
    problems.push(`${where}: clientSecret must be 1 to 256 printable characters without spaces`);
    return "";
  }
  if (typeof file !== "string" || file === "") {
    problems.push(`${where}: clientSecretFile must be a path`);
    return "";
  }
  try {
    const secret = readFileSync(file, "utf8").trim();
    if (CLIENT_TEXT.test(secret)) return secret;
    problems.push(`${where}: clientSecretFile ${file} must hold 1 to 256 printable characters without spaces`);
  } catch (err) {
    problems.push(`${where}: clientSecretFile ${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  return "";
}

/** Why an issuer is unusable, or undefined. */
function issuerProblem(issuer: string): string | undefined {
  if (canonicalIssuer(issuer) === undefined) return "must be a canonical URL: no userinfo, query, fragment, default port or uppercase host";
  const url = new URL(issuer);
  if (url.protocol === "https:") return undefined;
  if (url.protocol === "http:" && LOOPBACK_HOSTS.has(url.hostname)) return undefined;
  return "must use https (http only on 127.0.0.1, [::1] or localhost): the client secret is sent to it";
}
