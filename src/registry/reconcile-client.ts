/**
 * What the reconcile reads of a registry (Distribution's HTTP API V2): the
 * catalogue (`/v2/_catalog`), each repository's tags (`/v2/<name>/tags/list`),
 * both paged with `n`/`last` and the `Link` header, and a tag's digest
 * (`HEAD /v2/<name>/manifests/<tag>`, `Docker-Content-Digest`). Every request
 * carries a bearer token for exactly the scope it needs and has a timeout.
 */
import { DIGEST_PATTERN } from "../domain/registry-names.js";
import { MANIFEST_MEDIA_TYPES } from "./notifications.js";

/** A registry token scope: `registry:catalog:*` or `repository:<name>:pull`. */
export type RegistryScope = { type: "registry"; name: "catalog"; actions: ["*"] } | { type: "repository"; name: string; actions: ["pull"] };

export interface RegistryClientOptions {
  /** The registry's base URL (http://host:port). */
  url: string;
  /** A bearer token for the scope, or null to send none (a registry without auth). */
  token: (scope: RegistryScope) => Promise<string | null>;
  /** Entries asked for per page (`n`). */
  pageSize: number;
  /** Each request's timeout. */
  timeoutMs: number;
}

/** Thrown when the registry answers something the reconcile cannot use (it stops: repairing from a partial view could remove what exists). */
export class RegistryReadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RegistryReadError";
  }
}

/** Reads a registry's catalogue, tags and digests. */
export interface RegistryClient {
  /** Repository names, in the registry's order, at most limit. */
  repositories(limit: number): AsyncIterable<string>;
  /** A repository's tags, at most limit (more is an error: the view would be partial). */
  tags(repository: string, limit: number): Promise<string[]>;
  /** The manifest digest a tag points at, or null when it is gone. */
  digest(repository: string, tag: string): Promise<string | null>;
}

const ACCEPT = [...MANIFEST_MEDIA_TYPES].join(", ");

/** The path and query of a `Link: <…>; rel="next"` header, or null. */
function nextLink(link: string | null): string | null {
  const m = /<([^>]+)>\s*;\s*rel="?next"?/.exec(link ?? "");
  return m ? m[1]! : null;
}

export function createRegistryClient(opts: RegistryClientOptions): RegistryClient {
  const base = opts.url.replace(/\/+$/, "");

  async function get(pathAndQuery: string, scope: RegistryScope, method = "GET"): Promise<Response> {
    const token = await opts.token(scope);
    const headers: Record<string, string> = method === "HEAD" ? { accept: ACCEPT } : { accept: "application/json" };
    if (token !== null) headers.authorization = `Bearer ${token}`;
    const url = new URL(pathAndQuery, `${base}/`);
    // The Link header may name another origin: only ever follow this registry's.
    if (url.origin !== new URL(base).origin) throw new RegistryReadError(`${pathAndQuery}: a next page on another origin`);
    // Not through the outbound-address guard (src/domain/outbound-address.ts, guarded-fetch.ts): this URL is the
    // operator's own registry, configured on the command line and usually internal, and no tenant can change it.
    try {
      return await fetch(url, { method, headers, signal: AbortSignal.timeout(opts.timeoutMs), redirect: "error" });
    } catch (err) {
      throw new RegistryReadError(`${method} ${url.pathname}: ${(err as Error).message}`);
    }
  }

  async function json<T>(res: Response, what: string): Promise<T> {
    if (res.status !== 200) throw new RegistryReadError(`${what}: HTTP ${res.status} ${(await res.text()).slice(0, 200)}`);
    return (await res.json()) as T;
  }

  /** Every entry of a paged list, following Link until it ends or limit is passed. */
  async function* paged<K extends string>(first: string, key: K, scope: RegistryScope, limit: number): AsyncGenerator<string> {
    let next: string | null = first;
    let count = 0;
    while (next !== null) {
      const res = await get(next, scope);
      // A repository the catalogue lists but whose tags are all gone is NAME_UNKNOWN to tags/list.
      if (res.status === 404 && key === "tags") return;
      const body = await json<Partial<Record<K, string[] | null>>>(res, new URL(next, `${base}/`).pathname);
      for (const entry of body[key] ?? []) {
        if (++count > limit) return;
        yield entry;
      }
      next = nextLink(res.headers.get("link"));
    }
  }

  return {
    repositories(limit) {
      return paged(`/v2/_catalog?n=${opts.pageSize}`, "repositories", { type: "registry", name: "catalog", actions: ["*"] }, limit);
    },

    async tags(repository, limit) {
      const out: string[] = [];
      const scope: RegistryScope = { type: "repository", name: repository, actions: ["pull"] };
      for await (const tag of paged(`/v2/${repository}/tags/list?n=${opts.pageSize}`, "tags", scope, limit + 1)) out.push(tag);
      if (out.length > limit) throw new RegistryReadError(`${repository}: more than ${limit} tags`);
      return out;
    },

    async digest(repository, tag) {
      const res = await get(
        `/v2/${repository}/manifests/${encodeURIComponent(tag)}`,
        { type: "repository", name: repository, actions: ["pull"] },
        "HEAD",
      );
      if (res.status === 404) return null;
      const digest = res.headers.get("docker-content-digest") ?? "";
      if (res.status !== 200 || !DIGEST_PATTERN.test(digest))
        throw new RegistryReadError(
          `HEAD /v2/${repository}/manifests/${tag}: HTTP ${res.status}, digest ${JSON.stringify(digest.slice(0, 80))}`,
        );
      return digest;
    },
  };
}
